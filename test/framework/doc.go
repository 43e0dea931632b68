// Package framework is the test harness's root: waiting with a deadline
// (Poll, Eventually), golden files (Golden) and waiting for the API
// server's authorizer to learn a grant (WaitAuthorized). Its parts, one
// package per concern, sit below it:
//   - envtest: one real kube-apiserver per test binary, for controllers'
//     and commands' tests (APIServer, NewClient, InstallCRDs, StartManager);
//   - localcluster: real local control planes (kwokctl) with kwok's fake
//     nodes for capacity and real nodes (kubelet, containerd) where pods
//     must run, their faults, and the peered pair (StartPeeredPair);
//   - images: the OCI image archives the real nodes import, built from
//     the repository with no registry, and the release before issue 27;
//   - netlab: network namespaces and veths that stand in for separate
//     machines, and free ports;
//   - machine: what the clusters share on this host: processes, cgroups
//     and cpusets, the host state a test must leave as it found it, and
//     process CPU and memory figures;
//   - tools: the Kubernetes binaries at the pinned versions, and the
//     binaries under test.
package framework
