// Package peering is the contract between the kubectl-offload CLI and the
// offload-agent, in the way k8s.io/cluster-bootstrap is kubeadm's and the
// controller-manager's: a leaf package that neither side owns.
//
// It holds the auth service's HTTP protocol and its one wire error type
// (Error), the peering token and its Secret on the provider, the Secrets a
// consumer keeps for each peer (writer and reader side by side), the CA pin
// and the pinned TLS client that checks it, the peer kubeconfig reader and
// the reader of the cluster identity. It imports no CLI and no agent package.
package peering
