package framework

import (
	"fmt"
	"path/filepath"
	"strings"
)

// kwokctlConfig renders the KwokctlConfiguration for one cluster: every
// binary local (so kwokctl downloads nothing), pinned ports, CSR signing in
// kube-controller-manager, and kwok managing only nodes annotated as fake.
func kwokctlConfig(bin, cacheDir, clusterDir, kubeVersion string, p clusterPorts, o ClusterOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  kubeVersion: %s
  kubeBinaryPrefix: %s
  kubectlBinary: %s
  kwokControllerBinary: %s
  etcdBinary: %s
  cacheDir: %s
  kubeApiserverPort: %d
  etcdPort: %d
  etcdPeerPort: %d
  kubeControllerManagerPort: %d
  kubeSchedulerPort: %d
  kwokControllerPort: %d
  disableQPSLimits: %t
componentsPatches:
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: %s=%s
- name: kube-apiserver
  extraArgs:
  - key: advertise-address
    value: 127.0.0.1
`, kubeVersion, bin, filepath.Join(bin, "kubectl"), filepath.Join(bin, "kwok"), filepath.Join(bin, "etcd"), cacheDir,
		p.apiserver, p.etcd, p.etcdPeer, p.controllerManager, p.scheduler, p.kwok, o.DisableQPSLimits,
		FakeNodeAnnotation, FakeNodeAnnotationValue)
	// The CSR signer uses the cluster CA that kwokctl generates in the
	// cluster's pki directory.
	fmt.Fprintf(&b, `- name: kube-controller-manager
  extraArgs:
  - key: cluster-signing-cert-file
    value: %s
  - key: cluster-signing-key-file
    value: %s
`, filepath.Join(clusterDir, "pki", "ca.crt"), filepath.Join(clusterDir, "pki", "ca.key"))
	return b.String()
}
