// Package policytruth is the NetworkPolicy truth table: a suite of
// Kubernetes NetworkPolicies applied one case at a time to a Skiff cluster
// of six pods in three namespaces on three nodes, with the reachability
// matrix measured with real TCP, UDP and ICMP packets and compared with
// what a plain reading of the Kubernetes rules gives.
//
// The reference (Allows, Expected) is written from the Kubernetes API
// documentation alone and shares no code with Skiff's policy compiler: it
// must never import controller/policy or any other part of Skiff that
// turns policies into rules, or the table would check the compiler against
// itself.
//
// What differs between the places that run the suite (the e2e tier with
// the CNI plugin on the host kernel, the kernel VM with offload nodes) is
// behind Env: how to label a namespace, make a pod and apply or delete a
// policy. Run does the rest: pods and their probe servers, the open matrix,
// every case applied, measured and deleted.
//
// SCTP is probed only where the user adds SCTPProbes to its probe list
// (the kernel VM): the development kernel has no SCTP to send. Elsewhere
// the cases' SCTP rules are compiled and installed, but not probed.
package policytruth
