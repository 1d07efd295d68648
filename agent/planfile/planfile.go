package planfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// The files of a saved plan, in its directory.
const (
	SnapshotName = "plan.pb"  // the whole plan (skiff.v1.Plan), written atomically
	LogName      = "plan.log" // the deltas accepted since, appended
)

const (
	headerLen = 8 // a record: payload length, CRC-32C of the payload (both little-endian uint32), payload
	// maxRecord bounds a record's length: a larger one is corruption.
	maxRecord = 64 << 20
	// minCompact is the log's size below which it is not compacted
	// however small the snapshot.
	minCompact = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File is the saved plan of one node in a directory: a snapshot and the
// deltas appended since. Safe for concurrent use.
type File struct {
	dir, node string
	log       *slog.Logger

	mu       sync.Mutex
	f        *os.File // the log, open once Append first writes to it
	logSize  int64    // bytes of good records in the log: where the next goes
	snapSize int64    // bytes of the snapshot
	rev      int64    // revision of the saved plan (0: none known; the next save is a snapshot)
}

// Open returns the saved plan of node in dir (made if missing when first
// written). It reads nothing: Load does.
func Open(dir, node string, log *slog.Logger) *File {
	return &File{dir: dir, node: node, log: log}
}

// Load reads the snapshot and applies the deltas logged after it, in
// order, and returns the plan; ok is false when there is no snapshot. A
// snapshot that cannot be read, parsed or is another node's is an error
// (the caller ignores the saved plan; the next save replaces it). The log
// is cut at its first record that is torn, corrupt, another node's or does
// not follow the plan so far (logged, not an error): the plan is what came
// before, and the next Append writes over the rest.
func (f *File) Load() (p plan.Plan, ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev, f.logSize, f.snapSize = 0, 0, 0
	path := filepath.Join(f.dir, SnapshotName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return plan.Plan{}, false, nil
	}
	if err != nil {
		return plan.Plan{}, false, fmt.Errorf("planfile: read %s: %w", path, err)
	}
	var pb skiffv1.Plan
	if err := proto.Unmarshal(b, &pb); err != nil {
		return plan.Plan{}, false, fmt.Errorf("planfile: %s is corrupt: %w", path, err)
	}
	if p, err = planpb.Plan(&pb); err != nil {
		return plan.Plan{}, false, fmt.Errorf("planfile: %s: %w", path, err)
	}
	if p.Node != f.node {
		return plan.Plan{}, false, fmt.Errorf("planfile: %s belongs to node %q, not %q", path, p.Node, f.node)
	}
	f.snapSize = int64(len(b))
	logPath := filepath.Join(f.dir, LogName)
	l, err := os.ReadFile(logPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return plan.Plan{}, false, fmt.Errorf("planfile: read %s: %w", logPath, err)
	}
	applied, good, why := f.replay(&p, l)
	if why != "" {
		f.log.Warn("saved plan: log cut", "file", logPath, "at", good, "of", len(l), "reason", why)
	}
	f.logSize, f.rev = int64(good), p.Revision
	f.log.Debug("saved plan read", "revision", p.Revision, "snapshot_bytes", len(b), "deltas", applied)
	return p, true, nil
}

// replay applies to p the records of log that follow it. It returns how
// many it applied, the length of the good records (those applied, and
// those of revisions p already had: written before a compaction whose
// snapshot holds them) and why it stopped before the end ("" when it did
// not).
func (f *File) replay(p *plan.Plan, log []byte) (applied, good int, why string) {
	for off := 0; off < len(log); {
		rest := log[off:]
		if len(rest) < headerLen {
			return applied, off, "torn record header"
		}
		n := binary.LittleEndian.Uint32(rest)
		if n > maxRecord || int(n) > len(rest)-headerLen {
			return applied, off, fmt.Sprintf("torn record of %d bytes", n)
		}
		payload := rest[headerLen : headerLen+int(n)]
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rest[4:]) {
			return applied, off, "record checksum mismatch"
		}
		var pb skiffv1.PlanDelta
		if err := proto.Unmarshal(payload, &pb); err != nil {
			return applied, off, fmt.Sprintf("record: %v", err)
		}
		d, err := planpb.Delta(&pb)
		if err != nil {
			return applied, off, fmt.Sprintf("record: %v", err)
		}
		switch {
		case d.Node != p.Node:
			return applied, off, fmt.Sprintf("record for node %q", d.Node)
		case d.Revision <= p.Revision:
			// Before the snapshot: it holds this delta already.
		case d.From != p.Revision:
			return applied, off, fmt.Sprintf("delta from revision %d does not follow %d", d.From, p.Revision)
		default:
			if err := p.Apply(d); err != nil {
				return applied, off, fmt.Sprintf("delta %d->%d: %v", d.From, d.Revision, err)
			}
			applied++
		}
		off += headerLen + int(n)
	}
	return applied, len(log), ""
}

// Snapshot saves p as the whole plan (written atomically) and empties the
// log. Idempotent.
func (f *File) Snapshot(p plan.Plan) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshot(p)
}

func (f *File) snapshot(p plan.Plan) error {
	b, err := proto.Marshal(planpb.PlanPB(p))
	if err != nil {
		return fmt.Errorf("planfile: encode plan: %w", err)
	}
	if err := atomicfile.Write(f.dir, SnapshotName, b); err != nil {
		return fmt.Errorf("planfile: %w", err)
	}
	// The snapshot holds every logged delta: what is left in the log if
	// the truncation fails is skipped by Load (revisions it has), but
	// where the next record goes is not known then: the next save is a
	// snapshot again.
	f.rev, f.snapSize, f.logSize = 0, int64(len(b)), 0
	if f.f != nil {
		if err := f.f.Truncate(0); err != nil {
			return fmt.Errorf("planfile: empty %s: %w", LogName, err)
		}
	} else if err := os.Truncate(filepath.Join(f.dir, LogName), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("planfile: empty %s: %w", LogName, err)
	}
	f.rev = p.Revision
	return nil
}

// Append saves delta d, which took the saved plan to p: one record
// appended to the log and synced. When the saved plan is not at d's
// revision From (nothing loaded or saved yet, or a save failed) or the log
// has outgrown the snapshot, it saves a snapshot of p instead, so the log
// never takes longer to replay than the snapshot to read. On error the
// saved plan is the one before d (the record is cut off).
func (f *File) Append(p plan.Plan, d *skiffv1.PlanDelta) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rev == 0 || d.GetFromRevision() != f.rev || d.GetRevision() != p.Revision {
		return f.snapshot(p)
	}
	payload, err := proto.Marshal(d)
	if err != nil {
		return fmt.Errorf("planfile: encode delta: %w", err)
	}
	if f.logSize+int64(headerLen+len(payload)) > max(f.snapSize, minCompact) {
		return f.snapshot(p)
	}
	if f.f == nil {
		lf, err := os.OpenFile(filepath.Join(f.dir, LogName), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("planfile: %w", err)
		}
		f.f = lf
	}
	rec := record(payload)
	// Cut whatever follows the good records (a torn tail Load found, a
	// failed write), then write and sync.
	err = f.f.Truncate(f.logSize)
	if err == nil {
		_, err = f.f.WriteAt(rec, f.logSize)
	}
	if err == nil {
		err = f.f.Sync()
	}
	if err != nil {
		f.rev = 0 // not known what the log holds: the next save is a snapshot
		return fmt.Errorf("planfile: append to %s: %w", LogName, err)
	}
	f.logSize += int64(len(rec))
	f.rev = p.Revision
	return nil
}

// record frames payload: its length and CRC-32C, then itself.
func record(payload []byte) []byte {
	rec := make([]byte, headerLen, headerLen+len(payload))
	binary.LittleEndian.PutUint32(rec, uint32(len(payload)))
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(payload, castagnoli))
	return append(rec, payload...)
}

// Close closes the log. The File may be used again (it reopens the log).
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}
