package nltest

import "testing"

// Table runs a state-transition table on a namespace of the fake: each
// step's Apply, then the namespace's State (and those of other
// namespaces the step names) compared with what the step wants, the
// writes it took counted, and the same Apply again, which must write
// nothing.
//
//	nltest.Table{NS: w.NS(""), Writes: dp.Writes}.Run(t, []nltest.Step{
//		{Name: "network with a remote endpoint", Apply: apply(p), Want: nltest.Expect(foreign, blue), Writes: nltest.AnyWrites},
//	})
type Table struct {
	NS *NS
	// Writes is the datapath's count of writes so far (every handle it
	// writes through).
	Writes func() int
	// Show, when set, is what of a State text is compared (such as
	// ShortCookies).
	Show func(state string) string
}

// Step is one transition: someone else's doing first (Before, nil for
// none), then the datapath's Apply; the State wanted after it of the
// table's namespace (Expect) and of others (Others), the writes that
// Apply makes (AnyWrites: not counted), and what else must hold then
// (After, nil for nothing). Once marks an Apply that is another call
// of the datapath's (a Plumb, an Unplumb): it is not made again.
type Step struct {
	Name   string
	Before func(t *testing.T)
	Apply  func() error
	Want   string
	Others map[*NS]string
	Writes int
	After  func(t *testing.T)
	Once   bool
}

// AnyWrites is a Step's Writes when they are not counted.
const AnyWrites = -1

// Run runs the steps in order and stops at the first that fails: its
// Apply returns an error, a namespace holds another State (the failure
// shows the diff), it writes another number of times, After fails, or
// its Apply made again writes anything.
func (tb Table) Run(t *testing.T, steps []Step) {
	t.Helper()
	show := tb.Show
	if show == nil {
		show = func(s string) string { return s }
	}
	for _, s := range steps {
		if s.Before != nil {
			s.Before(t)
		}
		n := tb.Writes()
		if err := s.Apply(); err != nil {
			t.Fatalf("%s: apply: %v", s.Name, err)
		}
		if m := Mismatch(s.Want, show(tb.NS.State())); m != "" {
			t.Fatalf("%s: the namespace %s", s.Name, m)
		}
		for ns, want := range s.Others {
			if m := Mismatch(want, show(ns.State())); m != "" {
				t.Fatalf("%s: the namespace %s %s", s.Name, nsName(ns.Path()), m)
			}
		}
		if n := tb.Writes() - n; s.Writes != AnyWrites && n != s.Writes {
			t.Fatalf("%s: %d writes, want %d", s.Name, n, s.Writes)
		}
		if s.After != nil {
			s.After(t)
		}
		if s.Once {
			continue
		}
		n = tb.Writes()
		if err := s.Apply(); err != nil {
			t.Fatalf("%s: second apply: %v", s.Name, err)
		}
		if n := tb.Writes() - n; n != 0 {
			t.Fatalf("%s: applying the same plan again made %d writes, want 0", s.Name, n)
		}
	}
}
