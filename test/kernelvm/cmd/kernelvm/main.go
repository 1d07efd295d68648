// Command kernelvm builds test binaries of the given packages and runs
// them in one boot of Debian's kernel under qemu. See package kernelvm.
//
//	go run ./test/kernelvm/cmd/kernelvm [-v] [-run REGEXP] [-tags TAGS] [-show PKG,...] ./offload/eswitch ./test/kernelvm/vmtest
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm"
)

func main() {
	os.Exit(run())
}

func run() int {
	cache := flag.String("cache", kernelvm.DefaultCacheDir, "kernel cache prepared by hack/kernelvm/setup.sh")
	version := flag.String("kernel", "", "kernel version in the cache (default: <cache>/current)")
	timeout := flag.Duration("timeout", 15*time.Minute, "limit for the whole boot (the guest runs the test binaries directly: no per-binary limit)")
	runRE := flag.String("run", "", "only run tests matching this regexp (go test -run)")
	verbose := flag.Bool("v", false, "show the guest output of passing packages too")
	show := flag.String("show", "", "comma-separated packages, as given, whose guest output is shown even when they pass, each log message cut to its first line")
	tags := flag.String("tags", "", "build tags for the test binaries (go test -c -tags)")
	count := flag.Int("count", 1, "run each test this many times in the one boot (go test -count), to find a rare failure")
	short := flag.Bool("short", false, "run the tests in short mode (go test -short): long loops run a smaller count")
	bins := flag.String("bins", strings.Join(kernelvm.DefaultBinaries, ","), "comma-separated main packages built statically into $SKIFF_BIN of the guest (empty: none)")
	keep := flag.String("keep", "", "host directory receiving the files tests wrote into $SKIFF_KERNELVM_OUT (profiles)")
	memory := flag.Int("memory", 1024, "the guest's memory in MiB (qemu -m)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: kernelvm [flags] PKG...")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := kernelvm.Config{
		CacheDir: *cache, Version: *version, Packages: flag.Args(), Timeout: *timeout,
		Logger: log, Output: os.Stdout, Verbose: *verbose, Keep: *keep, Tags: *tags,
		Memory: strconv.Itoa(*memory),
	}
	for _, p := range strings.Split(*show, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(cfg.Packages, p) {
			fmt.Fprintf(os.Stderr, "kernelvm: -show %s: not among the packages to test\n", p)
			return 2
		}
		cfg.Show = append(cfg.Show, p)
	}
	for _, b := range strings.Split(*bins, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Binaries = append(cfg.Binaries, b)
		}
	}
	if *runRE != "" {
		cfg.TestArgs = append(cfg.TestArgs, "-test.run="+*runRE)
	}
	if *count < 1 {
		fmt.Fprintf(os.Stderr, "kernelvm: -count %d: want at least 1\n", *count)
		return 2
	}
	if *count > 1 {
		cfg.TestArgs = append(cfg.TestArgs, fmt.Sprintf("-test.count=%d", *count))
	}
	if *short {
		cfg.TestArgs = append(cfg.TestArgs, "-test.short")
	}
	res, err := kernelvm.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, p := range res.Packages {
		status := "ok  "
		if p.Err != nil {
			status = "FAIL"
		}
		fmt.Printf("%s %s: %d passed, %d failed, %d skipped", status, p.Package, len(p.Passed), len(p.Failed), len(p.Skipped))
		if p.Err != nil {
			fmt.Printf(": %v", p.Err)
		}
		fmt.Println()
	}
	passed, failed := res.Counts()
	fmt.Printf("kernel %s: build %s, boot and tests %s\n", res.Kernel, res.Build.Round(time.Millisecond), res.Boot.Round(time.Millisecond))
	fmt.Printf("kernelvm: %d passed, %d failed\n", passed, failed)
	if res.Failed() {
		return 1
	}
	return 0
}
