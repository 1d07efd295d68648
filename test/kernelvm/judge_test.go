package kernelvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name, log, rc, wantErr string
		passed                 int
	}{
		{"pass", "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n=== RUN   TestB/x\n    --- PASS: TestB/x (0.00s)\n--- PASS: TestB (0.00s)\nPASS\n", "0", "", 3},
		{"skip inside the VM", "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n    x_test.go:9: needs the kernel VM\n--- SKIP: TestB (0.00s)\nPASS\n", "0", "skipped inside the VM (nothing may skip there): TestB", 1},
		{"no test", "testing: warning: no tests to run\nPASS\n", "0", "no test ran", 0},
		{"failure", "=== RUN   TestA\n--- FAIL: TestA (0.00s)\nFAIL\n", "1", "exited 1 (failed: TestA)", 0},
		{"crash", "=== RUN   TestA\npanic: boom\n", "2", "exited 2", 0},
		{"zero exit with a failed line", "--- FAIL: TestA (0.00s)\n--- PASS: TestB (0.00s)\n", "0", "tests failed: TestA", 1},
		{"no rc", "--- PASS: TestA (0.00s)\n", "", "no exit status", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "x.test")
			if err := os.WriteFile(base+".log", []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.rc != "" {
				if err := os.WriteFile(base+".rc", []byte(tc.rc+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			pr := judge("./x", base)
			if tc.wantErr == "" && pr.Err != nil {
				t.Fatalf("err = %v", pr.Err)
			}
			if tc.wantErr != "" && (pr.Err == nil || !strings.Contains(pr.Err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", pr.Err, tc.wantErr)
			}
			if tc.rc != "" && len(pr.Passed) != tc.passed {
				t.Errorf("passed = %v, want %d", pr.Passed, tc.passed)
			}
		})
	}
	if pr := judge("./x", filepath.Join(t.TempDir(), "missing")); pr.Err == nil {
		t.Error("missing output judged a pass")
	}
}

func TestModuleOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modules.dep", "kernel/a/act_ct.ko.xz: kernel/n/nf_conntrack.ko.xz kernel/l/libcrc32c.ko.xz\n"+
		"kernel/n/nf_conntrack.ko.xz: kernel/l/libcrc32c.ko.xz\nkernel/l/libcrc32c.ko.xz:\n"+
		"kernel/c/crc32c_generic.ko.xz:\nkernel/c/crc32c-intel.ko.xz:\nupdates/netdevsim.ko: kernel/p/psample.ko.xz\nkernel/p/psample.ko.xz:\n")
	write("modules.builtin", "kernel/drivers/virtio/virtio_pci.ko\n")
	write("modules.softdep", "softdep libcrc32c pre: crc32c\n")
	write("modules.alias", "alias crc32c crc32c_intel\nalias crc32c crc32c_generic\n")
	order, files, err := moduleOrder(dir, []string{"virtio_pci", "act_ct", "netdevsim", "nf_conntrack"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(order, " "), "crc32c_generic libcrc32c nf_conntrack act_ct psample netdevsim"; got != want {
		t.Errorf("order = %q, want %q", got, want)
	}
	if files["netdevsim"] != "updates/netdevsim.ko" {
		t.Errorf("files = %v", files)
	}
	if _, _, err := moduleOrder(dir, []string{"cls_flower"}); err == nil || !strings.Contains(err.Error(), "cls_flower") {
		t.Errorf("unknown module: %v", err)
	}
}

func TestEarlyPanic(t *testing.T) {
	const oops = "[    1.270000] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n[    1.271000] RIP: 0010:enqueue_timer+0x1/0x90\n[    1.280000] Kernel panic - not syncing: Fatal exception in interrupt\n"
	for _, tc := range []struct {
		name, console string
		early         bool
	}{
		{"oops at boot", "[    0.000000] Linux version 6.12\n" + oops, true},
		{"panic after the first test started", "[    0.5] x\n" + startMarker + "\nKERNELVM-RAN a.test rc=0 3s\n" + oops, false},
		{"clean boot, tests started", startMarker + "\n", false},
		{"no console at all", "", false},
	} {
		line, early := earlyPanic(tc.console)
		if early != tc.early {
			t.Errorf("%s: early = %v (%q), want %v", tc.name, early, line, tc.early)
		}
		if early && !strings.Contains(line, "Oops: int3") {
			t.Errorf("%s: line %q does not name the panic", tc.name, line)
		}
	}
}

func TestShortLog(t *testing.T) {
	log := "=== RUN   TestA\n" +
		"    a_test.go:10: cluster up in 2s\n" +
		"    daemon.go:46: ---- skpn1 skiff-agent ----\n" +
		"        time=1 level=INFO msg=a\n" +
		"        time=2 level=INFO msg=b\n" +
		"\n" +
		"    suite.go:112: no policy: 180 probes match (1.2s)\n" +
		"=== RUN   TestA/sub\n" +
		"        a_test.go:20: in the subtest\n" +
		"            continued\n" +
		"    --- PASS: TestA/sub (0.10s)\n" +
		"--- PASS: TestA (12.00s)\n" +
		"offloadbench: install=5\n" +
		"PASS\n"
	want := "=== RUN   TestA\n" +
		"    a_test.go:10: cluster up in 2s\n" +
		"    daemon.go:46: ---- skpn1 skiff-agent ----\n" +
		"        [3 more lines]\n" +
		"    suite.go:112: no policy: 180 probes match (1.2s)\n" +
		"=== RUN   TestA/sub\n" +
		"        a_test.go:20: in the subtest\n" +
		"        [1 more line]\n" +
		"    --- PASS: TestA/sub (0.10s)\n" +
		"--- PASS: TestA (12.00s)\n" +
		"        [1 more line]\n" +
		"PASS"
	if got := ShortLog(log); got != want {
		t.Errorf("ShortLog =\n%s\nwant\n%s", got, want)
	}
}
