// Package cluster runs a real Kubernetes cluster on one machine for tests:
// etcd (Debian's), kube-apiserver, kube-controller-manager and
// kube-scheduler built from the Kubernetes modules (hack/k8s/setup.sh),
// and worker nodes, each a network namespace on an underlay bridge and a
// mount namespace of its own, with its own containerd (Debian's) and
// kubelet, and kube-proxy on request. There is no registry: images are
// docker-archive tarballs (internal/images) imported into every node.
//
//	pause, testpod := cluster.TestImages(t, t.TempDir())
//	c := cluster.Start(t, cluster.Options{Nodes: 2, KubeProxy: true, Images: []string{pause, testpod},
//		BeforeKubelet: func(n *cluster.Node) error { return installCNI(n.CNIBinDir(), n.CNIConfDir()) }})
//	c.WaitNodesReady(t, time.Minute)           // Ready once a CNI is installed
//	c.WaitDefaultServiceAccount(t, "default")  // pods are refused before
//	c.Apply(t, podYAML)
//	c.MustKubectl(t, "wait", "--for=condition=Ready", "pod/a")
//	out := c.MustKubectl(t, "exec", "a", "--", "probe", "tcp", "203.0.113.7:8080")
//	c.Nodes[0].RestartKubelet(t)
//	c.Nodes[1].PowerOff(); c.Nodes[1].PowerOn()
//
// The API server listens on the underlay (192.0.2.254:6443) only: kubectl
// runs in the underlay's namespace (Cluster.Kubectl) or a node's
// (Cluster.KubectlIn), client-go through Cluster.RESTConfig. Stop (run
// when the test ends) kills every process and container, unmounts what
// they mounted, and removes the cgroups, namespaces and directory; the
// last cluster running on the machine restores the sysctls the kubelets
// changed. A cluster whose test process died is cleaned up by the next
// Start on the machine.
package cluster
