package kernelvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultCacheDir is where hack/kernelvm/setup.sh caches kernels.
const DefaultCacheDir = "/var/cache/skiff-kernelvm"

// DefaultBinaries are the project's commands the runner ships into the
// guest ($SKIFF_BIN) unless told otherwise.
var DefaultBinaries = []string{"./cmd/skiff-agent", "./cmd/skiff-controller", "./cmd/skiffctl", "./cmd/skiff-cni"}

// Config of one VM run.
type Config struct {
	CacheDir string // DefaultCacheDir when empty
	Version  string // <CacheDir>/current when empty
	Modules  []string
	// Packages to test, as go test takes them (./offload/eswitch).
	Packages []string
	// TestArgs are passed to every test binary (e.g. -test.run=X).
	TestArgs []string
	// Tags are build tags for the test binaries (go test -c -tags), for
	// test files kept out of other runs by a build constraint.
	Tags string
	// Binaries are main packages (./cmd/skiff-agent) built statically
	// (CGO_ENABLED=0 go build) into the share; tests in the guest find
	// them in the directory named by $SKIFF_BIN (guest.Bin).
	Binaries []string
	// Dir is the module directory go builds in; the working directory
	// when empty.
	Dir     string
	Timeout time.Duration // for the whole boot; 5 minutes when zero
	Memory  string        // qemu -m; "1024" when empty
	CPUs    int           // qemu -smp; 2 when zero
	Logger  *slog.Logger
	// Output receives the guest's test output of failed packages (of all
	// packages when Verbose, shortened for those in Show), and the
	// console on a broken boot.
	Output  io.Writer
	Verbose bool
	// Show lists packages (as in Packages) whose guest output is printed
	// even when they pass, each log message cut to its first line
	// (ShortLog); Verbose prints it whole.
	Show []string
	// Keep, when set, is a host directory that receives the files the
	// tests wrote into $SKIFF_KERNELVM_OUT (such as CPU profiles), after
	// the run.
	Keep string
}

// PackageResult is what the guest reported for one package.
type PackageResult struct {
	Package  string
	Passed   []string
	Failed   []string
	Skipped  []string
	ExitCode int
	Log      string
	Err      error // why the package counts as failed; nil when it passed
}

// Result of a run.
type Result struct {
	Kernel   string
	Packages []PackageResult
	Build    time.Duration
	Boot     time.Duration // qemu start to power-off, tests included
	Console  string
}

// Failed reports whether any package failed.
func (r *Result) Failed() bool {
	for _, p := range r.Packages {
		if p.Err != nil {
			return true
		}
	}
	return false
}

// Counts returns the number of passed and failed tests (a package that
// failed without a failing test counts as one failure).
func (r *Result) Counts() (passed, failed int) {
	for _, p := range r.Packages {
		passed += len(p.Passed)
		failed += len(p.Failed)
		if p.Err != nil && len(p.Failed) == 0 {
			failed++
		}
	}
	return passed, failed
}

var (
	rePass = regexp.MustCompile(`(?m)^\s*--- PASS: (\S+)`)
	reFail = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	reSkip = regexp.MustCompile(`(?m)^\s*--- SKIP: (\S+)`)
)

func binName(pkg string) string {
	s := strings.Trim(pkg, "./")
	s = strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(s)
	if s == "" {
		s = "root"
	}
	return s + ".test"
}

// Run builds the packages' test binaries, boots the VM once and returns
// what the guest reported. The error is for a harness that could not run
// (no cache, build failure, boot that did not finish); test failures are
// in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.CacheDir == "" {
		cfg.CacheDir = DefaultCacheDir
	}
	if cfg.Modules == nil {
		cfg.Modules = DefaultModules
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Memory == "" {
		cfg.Memory = "1024"
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Output == nil {
		cfg.Output = io.Discard
	}
	log := cfg.Logger
	if len(cfg.Packages) == 0 {
		return nil, errors.New("kernelvm: no packages to test")
	}
	if cfg.Version == "" {
		b, err := os.ReadFile(filepath.Join(cfg.CacheDir, "current"))
		if err != nil {
			return nil, fmt.Errorf("kernelvm: no prepared kernel (run hack/kernelvm/setup.sh): %w", err)
		}
		cfg.Version = strings.TrimSpace(string(b))
	}
	verDir := filepath.Join(cfg.CacheDir, cfg.Version)
	if _, err := os.Stat(filepath.Join(verDir, ".complete")); err != nil {
		return nil, fmt.Errorf("kernelvm: kernel %s not prepared in %s (run hack/kernelvm/setup.sh): %w", cfg.Version, verDir, err)
	}
	res := &Result{Kernel: cfg.Version}

	share, err := os.MkdirTemp("", "skiff-kernelvm-")
	if err != nil {
		return nil, fmt.Errorf("kernelvm: %w", err)
	}
	defer os.RemoveAll(share)
	for _, d := range []string{"bin", "out", "out/files", "skiffbin"} {
		if err := os.Mkdir(filepath.Join(share, d), 0o755); err != nil {
			return nil, fmt.Errorf("kernelvm: %w", err)
		}
	}

	start := time.Now()
	var names []string
	for _, pkg := range cfg.Packages {
		name := binName(pkg)
		out := filepath.Join(share, "bin", name)
		args := []string{"test", "-c", "-o", out}
		if cfg.Tags != "" {
			args = append(args, "-tags", cfg.Tags)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
		cmd.Dir = cfg.Dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kernelvm: go test -c %s: %w\n%s", pkg, err, b)
		}
		if _, err := os.Stat(out); err != nil {
			return nil, fmt.Errorf("kernelvm: %s has no test files: %w", pkg, err)
		}
		if len(cfg.TestArgs) > 0 {
			if err := os.WriteFile(filepath.Join(share, "args."+name), []byte(strings.Join(cfg.TestArgs, " ")), 0o644); err != nil {
				return nil, fmt.Errorf("kernelvm: %w", err)
			}
		}
		names = append(names, name)
	}
	if len(cfg.Binaries) > 0 {
		args := append([]string{"build", "-o", filepath.Join(share, "skiffbin") + "/"}, cfg.Binaries...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = cfg.Dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kernelvm: go build %s: %w\n%s", strings.Join(cfg.Binaries, " "), err, b)
		}
	}
	if err := os.WriteFile(filepath.Join(share, "tests.list"), []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("kernelvm: %w", err)
	}
	res.Build = time.Since(start)

	initrd, err := buildInitramfs(verDir, cfg.Version, cfg.Modules)
	if err != nil {
		return nil, fmt.Errorf("kernelvm: initramfs: %w", err)
	}
	log.Info("kernelvm: booting", "kernel", cfg.Version, "initramfs", initrd, "packages", len(names), "build", res.Build.Round(time.Millisecond))

	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", "q35", "-cpu", "max", "-accel", "tcg,thread=multi",
		"-smp", strconv.Itoa(cfg.CPUs), "-m", cfg.Memory,
		// An emulated IOMMU, so that vfio-pci can bind (Debian builds
		// no VFIO no-IOMMU mode). It must come before the other devices.
		"-device", "intel-iommu,intremap=off",
		"-kernel", filepath.Join(verDir, "vmlinuz"), "-initrd", initrd,
		"-append", "console=ttyS0 quiet panic=-1 oops=panic loglevel=4 rdinit=/init intel_iommu=on iommu=pt",
		"-serial", "file:" + filepath.Join(share, "console.log"),
		"-virtfs", "local,path=" + share + ",mount_tag=host0,security_model=none,id=host0",
		// A spare PCI function for driver binding tests (vfio-pci).
		"-device", "virtio-rng-pci",
	}
	start = time.Now()
	var b bootResult
	for attempt := 1; ; attempt++ {
		b = boot(ctx, cfg.Timeout, args, share)
		res.Console = b.console
		if b.done || b.timedOut || attempt > maxEarlyPanics {
			break
		}
		panicLine, early := earlyPanic(b.console)
		if !early {
			break
		}
		// The emulator, not the code under test: a guest that died
		// before its first test (an Oops in multi-threaded TCG's code
		// patching, seen at boot) is booted again, at most twice.
		log.Warn("kernelvm: the guest panicked before any test started; booting again", "attempt", attempt, "panic", panicLine)
		fmt.Fprintf(cfg.Output, "kernelvm: the guest panicked before any test started (boot %d): %s; booting again\n", attempt, panicLine)
		if err := resetOut(share); err != nil {
			return res, err
		}
	}
	res.Boot = time.Since(start)
	if !b.done {
		fmt.Fprintf(cfg.Output, "---- guest console ----\n%s\n---- qemu ----\n%s\n", b.console, b.qemuOut)
		why := "guest did not finish"
		if b.timedOut {
			why = fmt.Sprintf("guest did not finish within %s", cfg.Timeout)
		}
		// Keep what the guest did write: a package's log may say where it hung.
		for _, n := range names {
			if b, err := os.ReadFile(filepath.Join(share, "out", n+".log")); err == nil {
				fmt.Fprintf(cfg.Output, "---- %s (unfinished) ----\n%s\n", n, b)
			}
		}
		return res, fmt.Errorf("kernelvm: %s (qemu: %v)", why, b.qemuErr)
	}
	if cfg.Keep != "" {
		if err := keepFiles(filepath.Join(share, "out", "files"), cfg.Keep); err != nil {
			return res, err
		}
	}
	if b, _ := os.ReadFile(filepath.Join(share, "out", "uname")); len(b) > 0 {
		res.Kernel = strings.TrimSpace(string(b))
	}
	var insmodErr error
	if b, _ := os.ReadFile(filepath.Join(share, "out", "insmod.err")); len(bytes.TrimSpace(b)) > 0 {
		dm, _ := os.ReadFile(filepath.Join(share, "out", "dmesg.boot"))
		insmodErr = fmt.Errorf("guest setup (modules, held hook keys) failed: %s\nguest kernel log:\n%s", bytes.TrimSpace(b), dm)
	}
	for i, n := range names {
		pr := judge(cfg.Packages[i], filepath.Join(share, "out", n))
		if pr.Err == nil && insmodErr != nil {
			pr.Err = insmodErr
		}
		switch {
		case pr.Err != nil || cfg.Verbose:
			fmt.Fprintf(cfg.Output, "---- %s (guest output) ----\n%s\n", pr.Package, pr.Log)
		case slices.Contains(cfg.Show, pr.Package):
			fmt.Fprintf(cfg.Output, "---- %s (guest output, each log message's first line) ----\n%s\n", pr.Package, ShortLog(pr.Log))
		}
		res.Packages = append(res.Packages, pr)
	}
	return res, nil
}

// maxEarlyPanics is how often a guest that panicked before its first test
// is booted again.
const maxEarlyPanics = 2

// startMarker is what the guest's init prints on the console before it
// runs the first test binary.
const startMarker = "KERNELVM-TESTS-START"

type bootResult struct {
	console  string
	qemuOut  string
	qemuErr  error
	done     bool // the guest wrote its DONE marker
	timedOut bool
}

// boot runs qemu once, until the guest powers off or timeout passes.
func boot(ctx context.Context, timeout time.Duration, args []string, share string) bootResult {
	bootCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_ = os.Remove(filepath.Join(share, "console.log"))
	qemu := exec.CommandContext(bootCtx, "qemu-system-x86_64", args...)
	var qout bytes.Buffer
	qemu.Stdout, qemu.Stderr = &qout, &qout
	qerr := qemu.Run() // its exit status says nothing about the tests
	cons, _ := os.ReadFile(filepath.Join(share, "console.log"))
	_, err := os.Stat(filepath.Join(share, "out", "DONE"))
	return bootResult{console: string(cons), qemuOut: qout.String(), qemuErr: qerr, done: err == nil, timedOut: bootCtx.Err() != nil}
}

var rePanic = regexp.MustCompile(`(?m)^.*(Kernel panic|Oops:|BUG:|general protection fault).*$`)

// earlyPanic reports whether a console shows the kernel dying before the
// guest started its first test, and the line that says so. A panic after
// the start marker is the tests' business and is never retried.
func earlyPanic(console string) (string, bool) {
	if strings.Contains(console, startMarker) {
		return "", false
	}
	line := rePanic.FindString(console)
	return strings.TrimSpace(line), line != ""
}

// resetOut empties the guest's output directory for another boot.
func resetOut(share string) error {
	out := filepath.Join(share, "out")
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("kernelvm: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(out, "files"), 0o755); err != nil {
		return fmt.Errorf("kernelvm: %w", err)
	}
	return nil
}

// judge reads what the guest wrote for one package.
func judge(pkg, base string) PackageResult {
	pr := PackageResult{Package: pkg, ExitCode: -1}
	logb, err := os.ReadFile(base + ".log")
	if err != nil {
		pr.Err = fmt.Errorf("no output from the guest: %w", err)
		return pr
	}
	pr.Log = string(logb)
	rcb, err := os.ReadFile(base + ".rc")
	if err != nil {
		pr.Err = fmt.Errorf("no exit status from the guest: %w", err)
		return pr
	}
	pr.ExitCode, err = strconv.Atoi(strings.TrimSpace(string(rcb)))
	if err != nil {
		pr.Err = fmt.Errorf("bad exit status %q from the guest", rcb)
		return pr
	}
	for _, m := range rePass.FindAllStringSubmatch(pr.Log, -1) {
		pr.Passed = append(pr.Passed, m[1])
	}
	for _, m := range reFail.FindAllStringSubmatch(pr.Log, -1) {
		pr.Failed = append(pr.Failed, m[1])
	}
	for _, m := range reSkip.FindAllStringSubmatch(pr.Log, -1) {
		pr.Skipped = append(pr.Skipped, m[1])
	}
	switch {
	case pr.ExitCode != 0:
		pr.Err = fmt.Errorf("test binary exited %d (failed: %s)", pr.ExitCode, strings.Join(pr.Failed, ", "))
	case len(pr.Failed) > 0:
		pr.Err = fmt.Errorf("tests failed: %s", strings.Join(pr.Failed, ", "))
	case len(pr.Skipped) > 0:
		pr.Err = fmt.Errorf("tests skipped inside the VM (nothing may skip there): %s", strings.Join(pr.Skipped, ", "))
	case len(pr.Passed) == 0:
		pr.Err = errors.New("no test ran")
	}
	return pr
}

// reHead matches the lines of go test -v output that begin something: a
// test's start, end or result, a log message's first line (FILE.go:LINE:),
// the binary's verdict. What follows a log message's first line up to the
// next such line is the rest of that message.
var reHead = regexp.MustCompile(`^\s*(=== (RUN|PAUSE|CONT|NAME) |--- (PASS|FAIL|SKIP): |\S+\.go:\d+: )|^(PASS|FAIL)$`)

// ShortLog is a test binary's -test.v output with each log message cut to
// its first line, the lines cut counted in its place ("[12 more lines]"):
// which tests ran, what each logged and how it ended, without the long
// messages (a daemon's output logged at cleanup).
func ShortLog(log string) string {
	var b strings.Builder
	cut := 0
	flush := func() {
		switch {
		case cut == 1:
			b.WriteString("        [1 more line]\n")
		case cut > 1:
			fmt.Fprintf(&b, "        [%d more lines]\n", cut)
		}
		cut = 0
	}
	for line := range strings.Lines(log) {
		if reHead.MatchString(strings.TrimRight(line, "\n")) {
			flush()
			b.WriteString(line)
			continue
		}
		cut++
	}
	flush()
	return strings.TrimRight(b.String(), "\n")
}

// keepFiles copies the regular files of dir into keep (made if missing).
func keepFiles(dir, keep string) error {
	es, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("kernelvm: files the tests wrote: %w", err)
	}
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return fmt.Errorf("kernelvm: -keep: %w", err)
	}
	for _, e := range es {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("kernelvm: %w", err)
		}
		if err := os.WriteFile(filepath.Join(keep, e.Name()), b, 0o644); err != nil {
			return fmt.Errorf("kernelvm: -keep: %w", err)
		}
	}
	return nil
}
