// Package cluster runs a real Kubernetes cluster on one machine for tests:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler built
// from the Kubernetes modules (hack/k8s/setup.sh), and worker nodes, each a
// network namespace on an underlay bridge with its own containerd (Debian's)
// and kubelet (and kube-proxy on request). There is no registry: images are
// docker-archive tarballs (hack/image) imported into every node.
//
//	c := cluster.Start(t, cluster.Options{Nodes: 2, Images: []string{pause, testpod},
//		BeforeKubelet: func(n *cluster.Node) error { return installCNI(n.CNIBinDir(), n.CNIConfDir()) }})
//	c.WaitNodes(t, time.Minute, true)        // Ready once a CNI is installed
//	c.WaitDefaultServiceAccount(t, "default")
//	c.Apply(t, podYAML)
//	out := c.MustKubectl(t, "get", "pods", "-o", "wide")
//	c.Nodes[0].StopKubelet(); c.Nodes[0].StartKubelet()
//
// The API server listens on the underlay (192.0.2.254:6443) only; kubectl
// runs in the underlay's namespace (Cluster.Kubectl) or a node's
// (Cluster.KubectlIn). Stop (run when the test ends) kills every process
// and container, unmounts what they mounted, removes the nodes' cgroups and
// restores the sysctls the kubelets changed.
package cluster
