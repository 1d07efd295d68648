// Package deviceplugin runs Skiff's device plugin (cmd/skiff-deviceplugin)
// with a real kubelet and containerd (test/k8s/cluster), and gives
// real-cluster tests what they need to do the same: a node with stood-in
// VFs (NewVFs), the plugin started on it (StartPlugin), and the kubelet's
// pod resources answer for a pod (PodVFs).
//
// TestWithRealKubelet is the plugin against the kubelet (advertisement,
// allocation, restarts, health, bad configuration). TestCNIGetsTheKubeletsVF
// makes skiff-cni the node's network, with a real skiff-controller and
// skiff-agent on the node: a pod asking for a VF reaches skiff-cni, which
// asks the kubelet's pod resources API for the pod's VF and passes it to
// the agent; the VF it names is the one the API names. The agent runs the
// software datapath (no switchdev eswitch here) and refuses the VF with
// its reason rather than giving the pod a veth; moving the VF into the
// pod is shown in the kernel VM (test/kernelvm/vfpodvm).
//
// What is real: the kubelet (its device manager, registration,
// ListAndWatch, Allocate, checkpoint, pod resources API, node status), the
// scheduler's accounting of extended resources, containerd running the
// pod, the plugin binary as a process in the node's network and mount
// namespaces (so the kubelet's /var/lib/kubelet/device-plugins and the
// plugin's netlink link watch are the node's own), and netlink link
// events in the node's namespace.
//
// What is stood in (the machine has no SR-IOV NIC):
//
//   - sysfs: a fixture tree (offload/eswitch/sysfstest's ConnectX6: a
//     ConnectX-6 Dx-like PF ens1f0np0 at 0000:3b:00.0 on mlx5_core, VFs
//     0000:3b:00.2.. with vendor 15b3, device 101e, netdevs ens1f0v<i>,
//     representors) under the node's directory, given to the plugin with
//     --sys-root. A VF removed is a tree edit (sysfstest's RemoveVF), as
//     the kernel's sysfs changes when a function is hot-unplugged.
//   - netdevs: veth links in the node's network namespace named as the
//     tree names the PF and the VF netdevs, each with its peer p-<name>
//     up beside it (the host kernel has no dummy module). The plugin
//     reads netdevs from the tree; these links are what its link watch
//     hears (a VF removed deletes its link, which triggers the rescan at
//     once) and what a CNI would move into a pod. The PF's operstate in
//     the tree is a link to its stand-in's in a sysfs mounted from the
//     node's namespace: the PF link's health is the kernel's.
//   - devlink: the node's namespace has no devlink device 0000:3b:00.0,
//     so the eswitch mode reads "none" and the pool does not ask for
//     switchdev (switchdev health is covered by the kernel VM test,
//     deviceplugin/vm_test.go, on netdevsim).
//   - the device-info directory is under the node's directory
//     (--devinfo-dir), not the machine's /var/run; the test pod mounts it
//     (hostPath) at the standard path to read its file from inside.
package deviceplugin
