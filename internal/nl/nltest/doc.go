/*
Package nltest is a fake of internal/nl's Kernel that keeps state: a
small world of network namespaces whose links, addresses, routes and
rules, neighbours and FDB, nftables tables, sysctls, modules, tc qdiscs
and filters, devlink eswitches and SR-IOV VFs behave as the real kernel
does for every call the datapaths make, without root. A datapath runs
its whole Apply against it, and a test compares the namespaces' State
before and after (a state-transition table).

	w := nltest.New()                                // the host namespace, with lo
	w.AddDevice(nltest.Device{Name: "eth0", MAC: "02:00:00:00:00:01", Up: true})
	w.AddNS("/run/netns/pod-a")                      // a pod's, with its own lo
	k, _ := w.Open("")                               // an nl.Kernel: w.Open is an nl.OpenFunc
	dp := software.New(software.Options{Kernel: k, Open: w.Open})
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	fmt.Print(w.NS("").State())                      // one object a line, sorted, by name
	// link skb100 bridge mtu 1450 up alias skiff:bridge:100
	// addr skb100 10.0.0.1/24
	// ...

Staging what the datapaths find rather than make is the NS's test-setup
API (setup.go): physical devices with a switch id (representors, PFs
with VFs), hardware-capable links for tc and their drivers' refusals,
devlink devices, neighbour replies, someone else's nftables table,
counters of nft rules, pairs a learning rule adds to a dynamic set
(Learn), tc actions and links' counters, lost tc notifications,
sysctls the fake does not model. A tc.Client of the fake (Kernel.TC)
holds filters as the kernel does (what the codec carries: tc.Decode of
each filter's encoding) and its tc.Watcher (Kernel.WatchTC) reports
other clients' changes as the real watch does.

TestConformance runs one script of calls against the fake and the real
kernel (root, throwaway namespaces) and compares what both read back;
TestConformanceTC does the same for tc in the kernel VM. README.md says
what is modelled and what is not.
*/
package nltest
