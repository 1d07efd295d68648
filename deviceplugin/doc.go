// Package deviceplugin is Skiff's kubelet device plugin (API v1beta1):
// it advertises a node's SR-IOV VFs as extended resources (skiff.io/vf),
// one pool per configured resource, and tells the kubelet which are
// healthy as the hardware changes.
//
//	cfg, err := deviceplugin.LoadConfig("/etc/skiff/deviceplugin.yaml")
//	err = deviceplugin.Run(ctx, deviceplugin.Options{Pools: cfg, Logger: log})
//
// Devices are VFs named by PCI address. Allocate writes a device-info file
// per VF (Network Plumbing WG device-info specification 1.1.0) and sets
// PCIDEVICE_<RESOURCE>; vfio pools also get /dev/vfio device nodes.
// GetPreferredAllocation keeps a pod's VFs on one PF and NUMA node. The
// CNI learns which VFs a pod got from the kubelet's pod resources API
// (package podresources).
package deviceplugin
