package deviceplugin

import (
	"bytes"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirWatch reports, through inotify, the names of entries created in or
// removed from one directory. It notices a kubelet restart (a new
// kubelet.sock) even when the new socket file gets the old one's inode
// number and change time, which polling stat cannot tell apart.
type dirWatch struct {
	f      *os.File // nonblocking: on the runtime's poller, so Close ends a Read
	events chan string
}

// watchDir starts watching dir. Names arrive on events (coalesced: a name
// may be dropped when the reader is behind, never the fact that something
// changed, since an empty name is sent then).
func watchDir(dir string) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("deviceplugin: inotify: %w", err)
	}
	const mask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("deviceplugin: inotify %s: %w", dir, err)
	}
	w := &dirWatch{f: os.NewFile(uintptr(fd), "inotify:"+dir), events: make(chan string, 64)}
	go w.read()
	return w, nil
}

func (w *dirWatch) read() {
	defer close(w.events)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil || n <= 0 {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				name = string(bytes.TrimRight(raw, "\x00"))
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_IGNORED != 0 {
				return // the directory went away
			}
			select {
			case w.events <- name:
			default:
				select {
				case w.events <- "":
				default:
				}
			}
		}
	}
}

// close stops the watch; events is closed once the reader ends.
func (w *dirWatch) close() { _ = w.f.Close() }
