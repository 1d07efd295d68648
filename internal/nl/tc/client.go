package tc

// Client is what Skiff's programmers ask of tc in one network namespace:
// write and dump filters, list qdiscs, give a device clsact. *Conn is the
// kernel's (a Kernel's TC in internal/nl opens one); internal/nl/nltest
// keeps a fake that holds filters as the kernel would. Not safe for
// concurrent use.
type Client interface {
	// Write carries out ops in order and returns one entry per op: nil,
	// or the kernel's refusal (errors.Is works with unix.E*). err is a
	// failure of the connection.
	Write(ops []Op) ([]error, error)
	// WriteAny is Write for ops that do not depend on each other, in no
	// promised order (bulk writes may be split across sockets).
	WriteAny(ops []Op) ([]error, error)
	// Do carries out one op and returns its error.
	Do(op Op) error
	// Dump returns the filters of a device (see DumpOptions) in the
	// kernel's order; DumpFunc calls fn for each (f is fn's to keep).
	Dump(ifindex int, o DumpOptions) ([]Filter, error)
	DumpFunc(ifindex int, o DumpOptions, fn func(f *Filter)) error
	// DumpTerse calls fn for every filter of the given chains (nil:
	// every chain) of ifindex's ingress as a terse dump carries it; f
	// is fn's for the call only (its Cookie is fn's to keep). The
	// kernel has no terse form of a fw filter: a terse dump ends,
	// without an error, at the first fw priority it meets (that
	// priority and what follows in the dump are not reported), so a
	// chain that may hold one is read with Dump.
	DumpTerse(ifindex int, chains []uint32, fn func(f *Terse)) error
	// Qdiscs lists the qdiscs of every device.
	Qdiscs() ([]Qdisc, error)
	// AddClsact gives a device a clsact qdisc (EEXIST when it has one).
	AddClsact(ifindex int) error
	// PortIDs are the netlink port ids of the client's sockets:
	// notifications of its writes carry them (Watcher.Ignore).
	PortIDs() []uint32
	// Messages is the number of messages sent and received so far.
	Messages() int64
	Close() error
}

// Watcher follows the tc notifications of a namespace and remembers which
// devices someone else changed. *Watch is the kernel's. Safe for
// concurrent use.
type Watcher interface {
	// Ignore makes changes through the sockets of these port ids (a
	// Client's PortIDs) not count.
	Ignore(portIDs ...uint32) error
	// Changes returns what someone else changed on each device since
	// the last call, and whether notifications were lost (then any
	// device may have changed), and forgets them.
	Changes() (devs map[int]DeviceChanges, lost bool)
	// Changed is Changes without what changed on each device.
	Changed() (devs map[int]bool, lost bool)
	// Notifications is the number of notifications read so far.
	Notifications() int64
	Close() error
}

var (
	_ Client  = (*Conn)(nil)
	_ Watcher = (*Watch)(nil)
)
