// Package testkit holds what Skiff's tests share: throwaway network
// namespaces and iproute2 inside them, ping and TCP probes between
// namespaces, polling with a deadline, a free loopback port, a devlink on
// the kernel fake (internal/nl/nltest) and a test certificate authority.
// Tests of every tier use it: unit tests on the host, the privileged
// tiers (make test as root), the end-to-end tests of test/e2e, the
// Kubernetes tests and, through package guest's Tools, the tests inside
// the kernel VM.
//
// Tests that need root call Require (New does): it fails the test, never
// skips, because the privileged tiers must run for real in CI, which runs
// as root.
//
//	ns := testkit.New(t)                                   // skt-<random>, deleted at the end
//	testkit.Run(t, ns, "ip", "link", "add", "d0", "type", "dummy")
//	var links []struct{ IfName string }
//	testkit.JSON(t, ns, &links, "ip", "-j", "link", "show")
//	nl.Open(testkit.Path(ns))                              // /run/netns/NAME
//
//	testkit.MustPing(t, a, "192.0.2.2", 2, 2*time.Second)  // fails t with ping's output
//	if testkit.Ping(a, "192.0.2.3", 1, time.Second) == nil { t.Fatal("policy let a reach .3") }
//	guest.Tools.MustPing(t, a, ip, 3, 3*time.Second)        // inside the kernel VM
//
//	testkit.Serve(t, b, "192.0.2.2:8080", "b")             // answers "b SOURCE"
//	server, seen, err := testkit.Ask(a, "198.51.100.1:80", 3*time.Second)
//	ok := testkit.Connects(a, "192.0.2.2:8080", time.Second)
//
//	testkit.Eventually(t, "the agent ready", 10*time.Second, func() (bool, string) {
//		s := a.Status()
//		return s.Ready, fmt.Sprintf("%+v", s) // the status shown when time runs out
//	})
//	testkit.Eventually(t, "plans agree", 20*time.Second, testkit.NoError(func() error { ... }))
//
//	addr := testkit.FreeAddr(t)                            // 127.0.0.1:PORT
//
//	pod := testkit.Open(t, nl.Open, testkit.Path(ns))      // closed when the test ends
//	k, host := testkit.Devlink(t, map[string]string{"pci/0000:03:00.0": "switchdev"}) // host.AddDevlink stages more
//	d := eswitch.New(eswitch.Options{SysRoot: tr.Root, Devlink: eswitch.NetlinkDevlink{Kernel: k}})
//
//	ca := testkit.NewCA(t)                                 // an hour
//	cert, key := ca.Loopback(t, "node:n1")                 // PEM, for 127.0.0.1
//	certFile, keyFile := ca.LoopbackFiles(t, "node:n1")
//	caFile := ca.File(t)
//
// The certificate authority itself is package testca, which does not
// import testing: the harnesses that build into binaries (test/scale,
// test/k8s/cluster) use it directly.
package testkit
