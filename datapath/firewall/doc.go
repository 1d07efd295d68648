// Package firewall is what Skiff's datapaths ask of nftables and of the
// node's forwarding sysctls, as plain descriptions internal/nl applies:
// the table that keeps tenant networks apart and decides what each
// network may route out (Isolation), the table that enforces
// NetworkPolicy per isolated endpoint (Policy.Table) and the reading of
// its counters (PolicyCounters), and the sysctls routing and bridged
// policy need. The software datapath uses all of it on its bridges, the
// offload datapath on its gateways (with the policy table for the egress
// the node's stack enforces after DNAT).
//
//	t := firewall.Isolation([]firewall.Device{{Name: "skb100", Egress: "snat"}})
//	change, err := k.SetTable(t)   // k: an nl.Kernel; nothing written when it matches
//	pol := firewall.Policy{Groups: groups, Endpoints: eps}.Table()
//	change, err = k.SetTable(pol)  // only set elements when only group members changed
//	cs, err := k.TableCounters(nl.NftInet, firewall.PolicyTable)
//	counters := firewall.PolicyCounters(cs)
package firewall
