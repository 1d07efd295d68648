// Package scale is Skiff's scale and high-availability harness: the real
// skiff-controller (one with its embedded etcd, or replicas on a
// three-member etcd cluster of real processes), thousands of simulated
// agents in this process (each a real gRPC client of AgentService with its
// own connection and node certificate, holding its plan in memory), and
// optionally one real skiff-agent in a network namespace. Its scenarios
// measure cold start, delta latency, CPU and memory at rest and under
// load, restarts, replica and etcd member loss, and bad input, and check
// every agent's plan against the controller's.
//
// cmd/skiff-scale runs it at full size (make scale); the package's test
// runs every scenario small, so that the harness cannot rot. See README.md.
package scale
