package planfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// widePlan is node n1's plan of n remote endpoints on one network, at
// revision 1.
func widePlan(n int) plan.Plan {
	p := plan.New("n1")
	p.Revision = 1
	p.Networks["pods"] = plan.Network{Name: "pods", VNI: 1, MTU: 1450}
	for i := range n {
		p.Remote[remoteName(i)] = remote(i)
	}
	return p
}

func remoteName(i int) string { return fmt.Sprintf("r%05d", i) }

func remote(i int) plan.Remote {
	return plan.Remote{Name: remoteName(i), Network: "pods", Node: fmt.Sprintf("node-%d", i/30),
		VTEP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i / 30 % 250)}), MAC: fmt.Sprintf("02:00:00:%02x:%02x:%02x", i>>16, (i>>8)&0xff, i&0xff),
		IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 15)}}
}

// step makes the delta that adds remote endpoint i to *p (or removes it,
// when del), applies it, and returns its message.
func step(t testing.TB, p *plan.Plan, i int, del bool) *skiffv1.PlanDelta {
	t.Helper()
	d := plan.Delta{Node: p.Node, From: p.Revision, Revision: p.Revision + 1}
	if del {
		d.RemoveRemote = []string{remoteName(i)}
	} else {
		d.UpsertRemote = []plan.Remote{remote(i)}
	}
	pb := planpb.DeltaPB(d)
	next := p.Clone()
	if err := next.Apply(d); err != nil {
		t.Fatal(err)
	}
	*p = next
	return pb
}

func logger(buf *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

func mustLoad(t *testing.T, f *File) plan.Plan {
	t.Helper()
	p, ok, err := f.Load()
	if err != nil || !ok {
		t.Fatalf("load: ok %v, %v", ok, err)
	}
	return p
}

func equal(t *testing.T, what string, got, want plan.Plan) {
	t.Helper()
	if !got.Equal(want) || got.Revision != want.Revision {
		t.Fatalf("%s: plan at revision %d with %d remotes, want revision %d with %d", what, got.Revision, len(got.Remote), want.Revision, len(want.Remote))
	}
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestSaveAndLoad: a snapshot, then deltas appended (not rewritten) and
// read back in order by a new File, whose own appends go on from there.
func TestSaveAndLoad(t *testing.T) {
	dir, buf := t.TempDir(), &bytes.Buffer{}
	f := Open(dir, "n1", logger(buf))
	if _, ok, err := f.Load(); ok || err != nil {
		t.Fatalf("load of an empty directory: ok %v, %v", ok, err)
	}
	p := widePlan(100)
	if err := f.Snapshot(p); err != nil {
		t.Fatal(err)
	}
	snap := size(t, filepath.Join(dir, SnapshotName))
	for i := range 10 {
		if err := f.Append(p, step(t, &p, 100+i, false)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Append(p, step(t, &p, 3, true)); err != nil {
		t.Fatal(err)
	}
	if got := size(t, filepath.Join(dir, SnapshotName)); got != snap {
		t.Fatalf("appending rewrote the snapshot (%d bytes, was %d)", got, snap)
	}
	if l := size(t, filepath.Join(dir, LogName)); l == 0 || l > snap/4 {
		t.Fatalf("log of 11 one-item deltas is %d bytes (snapshot %d)", l, snap)
	}
	f.Close()

	g := Open(dir, "n1", logger(buf))
	equal(t, "reloaded", mustLoad(t, g), p)
	if err := g.Append(p, step(t, &p, 200, false)); err != nil {
		t.Fatal(err)
	}
	equal(t, "reloaded after another append", mustLoad(t, Open(dir, "n1", logger(buf))), p)
	if strings.Contains(buf.String(), "log cut") {
		t.Fatalf("a clean log was cut: %s", buf)
	}
}

// TestTornAndCorruptTails: a log that ends in a torn or corrupt record, or
// in one that does not follow, loads up to the record before, says why,
// and the next Append writes over the rest.
func TestTornAndCorruptTails(t *testing.T) {
	for _, c := range []struct {
		name, why string
		spoil     func(log []byte, last int) []byte // last: where the last record starts
	}{
		{"torn header", "torn record header", func(l []byte, last int) []byte { return l[:last+5] }},
		{"torn payload", "torn record of", func(l []byte, _ int) []byte { return l[:len(l)-3] }},
		{"flipped payload byte", "checksum mismatch", func(l []byte, _ int) []byte { l[len(l)-2] ^= 0x40; return l }},
		{"huge length", "torn record of", func(l []byte, last int) []byte { copy(l[last:], []byte{0xff, 0xff, 0xff, 0x7f}); return l }},
		{"garbage appended", "torn record", func(l []byte, _ int) []byte { return append(l, 1, 2, 3) }},
		{"a long garbage tail", "torn record of", func(l []byte, _ int) []byte { return append(l, bytes.Repeat([]byte{0xaa}, 4096)...) }},
		{"a record repeated (skipped), then a gap", "from revision 9 does not follow 4", func(l []byte, last int) []byte {
			l = append(l, l[last:]...)
			b, _ := proto.Marshal(planpb.DeltaPB(plan.Delta{Node: "n1", From: 9, Revision: 10}))
			return append(l, record(b)...)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, buf := t.TempDir(), &bytes.Buffer{}
			f := Open(dir, "n1", logger(buf))
			p := widePlan(10)
			if err := f.Snapshot(p); err != nil {
				t.Fatal(err)
			}
			var before plan.Plan
			last := 0
			for i := range 3 {
				before = p
				last = int(size(t, filepath.Join(dir, LogName)))
				if err := f.Append(p, step(t, &p, 10+i, false)); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			want := before // the last record spoiled: the plan before it
			if !strings.HasPrefix(c.name, "torn") && !strings.HasPrefix(c.name, "flipped") && c.name != "huge length" {
				want = p // the records are whole: only what follows is cut
			}
			log, err := os.ReadFile(filepath.Join(dir, LogName))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, LogName), c.spoil(log, last), 0o600); err != nil {
				t.Fatal(err)
			}
			g := Open(dir, "n1", logger(buf))
			got := mustLoad(t, g)
			equal(t, "loaded", got, want)
			if !strings.Contains(buf.String(), "log cut") || !strings.Contains(buf.String(), c.why) {
				t.Fatalf("load said %q, want a cut because of %q", buf, c.why)
			}
			// The next append goes where the good records end.
			if err := g.Append(got, step(t, &got, 50, false)); err != nil {
				t.Fatal(err)
			}
			buf.Reset()
			equal(t, "after the next append", mustLoad(t, Open(dir, "n1", logger(buf))), got)
			if strings.Contains(buf.String(), "log cut") {
				t.Fatalf("the spoiled tail is still read: %s", buf)
			}
		})
	}
}

// TestCompaction: once the log would outgrow the snapshot it becomes a
// snapshot again, and records a compaction could not clear are skipped.
func TestCompaction(t *testing.T) {
	dir, buf := t.TempDir(), &bytes.Buffer{}
	f := Open(dir, "n1", logger(buf))
	p := widePlan(2000) // a snapshot far above minCompact
	if err := f.Snapshot(p); err != nil {
		t.Fatal(err)
	}
	snap := size(t, filepath.Join(dir, SnapshotName))
	var kept []byte // the log just before it was compacted
	compacted := false
	for i := 0; i < 100000 && !compacted; i++ {
		l, _ := os.ReadFile(filepath.Join(dir, LogName))
		if err := f.Append(p, step(t, &p, i%2000, i%2 == 0)); err != nil {
			t.Fatal(err)
		}
		if size(t, filepath.Join(dir, LogName)) == 0 {
			compacted, kept = true, l
		} else if size(t, filepath.Join(dir, LogName)) > snap {
			t.Fatalf("log of %d bytes, snapshot %d: not compacted", size(t, filepath.Join(dir, LogName)), snap)
		}
	}
	if !compacted {
		t.Fatal("never compacted")
	}
	equal(t, "after the compaction", mustLoad(t, Open(dir, "n1", logger(buf))), p)
	// As if the process died between the snapshot and emptying the log:
	// every record is of a revision the snapshot has.
	if err := os.WriteFile(filepath.Join(dir, LogName), kept, 0o600); err != nil {
		t.Fatal(err)
	}
	g := Open(dir, "n1", logger(buf))
	equal(t, "old records left in the log", mustLoad(t, g), p)
	if err := g.Append(p, step(t, &p, 7, false)); err != nil {
		t.Fatal(err)
	}
	equal(t, "an append after them", mustLoad(t, Open(dir, "n1", logger(buf))), p)
	if strings.Contains(buf.String(), "log cut") {
		t.Fatalf("records before the snapshot cut the log: %s", buf)
	}
}

// TestAppendNeedsTheSavedRevision: with nothing saved, or a delta that
// does not start at the saved revision, Append writes a snapshot.
func TestAppendNeedsTheSavedRevision(t *testing.T) {
	dir, buf := t.TempDir(), &bytes.Buffer{}
	f := Open(dir, "n1", logger(buf))
	p := widePlan(5)
	if err := f.Append(p, step(t, &p, 5, false)); err != nil { // nothing saved yet
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, SnapshotName)); err != nil {
		t.Fatalf("first append made no snapshot: %v", err)
	}
	p.Revision += 10 // a delta this File did not see
	if err := f.Append(p, step(t, &p, 6, false)); err != nil {
		t.Fatal(err)
	}
	if n := size(t, filepath.Join(dir, LogName)); n != 0 {
		t.Fatalf("a delta from an unsaved revision was appended (%d bytes)", n)
	}
	equal(t, "loaded", mustLoad(t, Open(dir, "n1", logger(buf))), p)
}

// TestBadSnapshot: a snapshot that is corrupt or another node's is an
// error naming the file, and the next save replaces it.
func TestBadSnapshot(t *testing.T) {
	dir, buf := t.TempDir(), &bytes.Buffer{}
	if err := os.WriteFile(filepath.Join(dir, SnapshotName), []byte("\xff\xff\xff"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := Open(dir, "n1", logger(buf))
	if _, ok, err := f.Load(); ok || err == nil || !strings.Contains(err.Error(), SnapshotName) {
		t.Fatalf("corrupt snapshot: ok %v, %v", ok, err)
	}
	other := widePlan(3)
	other.Node = "n2"
	if err := Open(dir, "n2", logger(buf)).Snapshot(other); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.Load(); ok || err == nil || !strings.Contains(err.Error(), `node "n2"`) {
		t.Fatalf("another node's snapshot: ok %v, %v", ok, err)
	}
	p := widePlan(3)
	if err := f.Append(p, step(t, &p, 3, false)); err != nil {
		t.Fatal(err)
	}
	equal(t, "after the bad snapshot was replaced", mustLoad(t, f), p)
}

// BenchmarkSave: one delta (one remote endpoint) saved on a plan of n
// remote endpoints, by rewriting the whole plan (what the agent did for
// every delta before this package) and by appending it.
func BenchmarkSave(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		for _, mode := range []string{"snapshot", "append"} {
			b.Run(fmt.Sprintf("remotes=%d/%s", n, mode), func(b *testing.B) {
				f := Open(b.TempDir(), "n1", slog.New(slog.DiscardHandler))
				p := widePlan(n)
				if err := f.Snapshot(p); err != nil {
					b.Fatal(err)
				}
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					// Add, then remove, one endpoint (in place: the
					// agent's clone is not what is measured).
					d := plan.Delta{Node: p.Node, From: p.Revision, Revision: p.Revision + 1}
					if i%2 == 0 {
						d.UpsertRemote = []plan.Remote{remote(n)}
					} else {
						d.RemoveRemote = []string{remoteName(n)}
					}
					i++
					if err := p.Apply(d); err != nil {
						b.Fatal(err)
					}
					var err error
					if mode == "snapshot" {
						err = f.Snapshot(p)
					} else {
						err = f.Append(p, planpb.DeltaPB(d))
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
