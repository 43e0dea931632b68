package remotenamespace

import (
	rbacv1 "k8s.io/api/rbac/v1"
)

// RemoteWorkloadsRole is the ClusterRole, installed by the chart, that a
// consumer's ServiceAccount gets in each of its twin namespaces, through a
// RoleBinding there only.
const RemoteWorkloadsRole = "offload-remote-workloads"

// RoleBindingName is the name of the RoleBinding, in a twin namespace, that
// binds RemoteWorkloadsRole to the consumer's ServiceAccount.
const RoleBindingName = "offload-consumer"

// RemoteWorkloadsRules returns the rules of RemoteWorkloadsRole: what the
// consumer's agent needs to reflect pods and the objects they use into a
// twin namespace, to proxy logs, exec, attach and port-forward, to add
// ephemeral containers and resize pods as a kubelet would, to claim the
// storage the provider lends (the quota and StoragePolicyName hold it to
// that), and to read
// what its pods use for the virtual node's resource metrics. The
// chart's ClusterRole must hold the same rules.
func RemoteWorkloadsRules() []rbacv1.PolicyRule {
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"get", "create"}},
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers", "pods/resize"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services", "serviceaccounts"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
	}
}
