package store

// SetHistoryWindow sets the revisions per watch of Changes and returns a
// function that restores it.
func SetHistoryWindow(w int64) (restore func()) {
	old := historyWindow
	historyWindow = w
	return func() { historyWindow = old }
}
