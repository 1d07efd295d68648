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
// Programmer installs a rule set with tc over netlink (github.com/florianl/go-tc):
// it dumps each device's ingress filters, keeps Skiff's (Skiff's
// priorities and a cookie starting with "sk" on the first action), adds
// what is missing, replaces in place what changed, deletes what nobody
// wants last, and writes nothing when all matches. Where a device offers
// hardware, a rule is asked for with skip_sw first; a refusal is kept
// (with the driver's message) and the rule is installed in software.
//
//	rules, err := flower.Compile(p, flower.Input{Reps: reps, VXLAN: "skvx"})
//	prog, err := flower.Open(0, log)
//	states, err := prog.Sync(devs, rules)
package flower
