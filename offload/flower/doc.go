// Package flower turns a node's plan into tc-flower rules and installs
// them: the rules of Skiff's offload datapath.
//
// Compile is pure: plan plus the node's representors (local endpoint ->
// netdev) and the external-mode VXLAN device give the exact rule set:
// encap on each representor's ingress (match the destination MAC,
// tunnel_key set, redirect to the VXLAN device), local forwarding between
// representors, decap on the VXLAN device (enc_key_id, enc_dst_ip,
// enc_dst_port and the destination MAC; tunnel_key unset; redirect),
// ARP requests for known addresses sent straight to their owner, and
// broadcast mirrored to every local endpoint and remote VTEP of the VNI.
//
// Programmer installs a rule set with tc over netlink (the codec of
// internal/nl/tc): it dumps each device's ingress filters, keeps Skiff's (Skiff's
// priorities and a cookie starting with "sk" on the first action), adds
// what is missing, replaces in place what changed, deletes what nobody
// wants last, and writes nothing when all matches. Where a device offers
// hardware, a rule is asked for with skip_sw first; a refusal is kept
// (with the driver's message) and the rule is installed in software.
//
// The forwarding rules sit in chain 3. CompilePolicy puts the node's
// NetworkPolicy ahead of them: chain 0 sends IPv4 of networks with an
// isolated endpoint through conntrack (one zone per network), chain 1
// passes established connections and checks the sender's egress rules,
// chain 2 the receiver's ingress rules and commits (policy.go).
// PolicyProgrammer installs those filters.
//
//	rules, err := flower.Compile(p, flower.Input{Reps: reps, VXLAN: "skvx"})
//	pol, err := flower.CompilePolicy(p, flower.Input{Reps: reps, VXLAN: "skvx"}, rules)
//	prog, err := flower.Open(k, log)   // k: an nl.Kernel of the node's namespace
//	states, err := prog.Sync(devs, rules)
package flower
