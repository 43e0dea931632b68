package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// releaseRevisions lists the Helm release records of the offload release.
func releaseRevisions(ctx context.Context, t *testing.T, c *localcluster.Cluster) []string {
	t.Helper()
	list, err := c.Kube.CoreV1().Secrets(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=offload"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Labels["version"]+"/"+s.Labels["status"])
	}
	return out
}

func TestInstallUpgradeUninstallOnALocalCluster(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "inst", FakeNodes: 2, RealNode: true})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl := ctrlClient(t, c)

	// The chapters, each a subtest that reports on its own. A chapter that
	// leaves what the next ones need stops the test when it fails; the
	// others let the rest run.

	// --dry-run prints every manifest and creates nothing.
	var objects []object
	t.Run("--dry-run creates nothing", func(t *testing.T) {
		manifest := mustOffload(t, c, append([]string{"install", "--cluster-name", "inst", "--dry-run", "-o", "yaml"}, localcluster.AgentValues()...)...)
		objects = manifestObjects(t, manifest)
		kinds := map[string]int{}
		for _, o := range objects {
			kinds[o.gvk.Kind]++
			if exists(ctx, t, cl, o) {
				t.Errorf("--dry-run created %s", o)
			}
		}
		// The real node's pod CIDR is detected, so the network fabric is on:
		// its DaemonSet and ServiceAccount, and the gateways' pod template.
		// The scheduling mutation is the webhook, with its Service, and where
		// the API server serves them, two MutatingAdmissionPolicies. The
		// StorageClass offload is the claims of offloaded pods'. The
		// controller-manager's metrics have a Service (and a ClusterRole to
		// read them).
		want := map[string]int{"CustomResourceDefinition": 9, "Deployment": 2, "DaemonSet": 1, "ServiceAccount": 3, "Service": 3, "ConfigMap": 2,
			"MutatingWebhookConfiguration": 1, "MutatingAdmissionPolicy": 0, "MutatingAdmissionPolicyBinding": 0, "ValidatingAdmissionPolicy": 15,
			"StorageClass": 1}
		if schedulingPolicyServed(t, c) {
			// And the webhook, for the pods that mount claims.
			want["MutatingAdmissionPolicy"], want["MutatingAdmissionPolicyBinding"] = 2, 2
		}
		for kind, want := range want {
			if kinds[kind] != want {
				t.Errorf("dry-run manifest has %d %s, want %d (kinds: %v)", kinds[kind], kind, want, kinds)
			}
		}
		if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, localcluster.InstallNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("--dry-run created namespace %s (err=%v)", localcluster.InstallNamespace, err)
		}
	})
	// The chapters below look for the manifest's objects.
	if len(objects) == 0 {
		t.Fatal("no object in the --dry-run manifest: nothing to look for after install")
	}

	// Install.
	var id map[string]string
	if !t.Run("install creates every object", func(t *testing.T) {
		installAgent(t, c)
		if revs := releaseRevisions(ctx, t, c); len(revs) != 1 || revs[0] != "1/deployed" {
			t.Fatalf("release records after install = %v, want [1/deployed]", revs)
		}
		for _, o := range objects {
			if !exists(ctx, t, cl, o) {
				t.Errorf("install did not create %s", o)
			}
		}
		for _, o := range objects {
			if o.gvk.Kind != "CustomResourceDefinition" {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := cl.Get(ctx, client.ObjectKey{Name: o.name}, crd); err != nil {
				t.Fatal(err)
			}
			established := false
			for _, cond := range crd.Status.Conditions {
				established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
			}
			if !established {
				t.Errorf("CRD %s is not established", o.name)
			}
		}
		for _, name := range []string{"offload-controller-manager", "offload-auth"} {
			d, err := c.Kube.AppsV1().Deployments(localcluster.InstallNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d.Status.AvailableReplicas != *d.Spec.Replicas {
				t.Errorf("deployment %s: %d of %d available after install", name, d.Status.AvailableReplicas, *d.Spec.Replicas)
			}
		}
		id = identity(ctx, t, c)
		if !uuidRE.MatchString(id["clusterID"]) || id["clusterName"] != "inst" {
			t.Fatalf("identity = %v, want a UUID and name inst", id)
		}
	}) {
		t.FailNow()
	}

	// version reports what is installed.
	t.Run("version reports the install", func(t *testing.T) {
		versionJSON := mustOffload(t, c, "version", "-o", "json")
		if !strings.Contains(versionJSON, `"installed": true`) || !strings.Contains(versionJSON, `"agentVersion": "v`) {
			t.Errorf("version after install does not report the installed chart and agent:\n%s", versionJSON)
		}
	})

	t.Run("RBAC is least privilege", func(t *testing.T) {
		checkRBAC(ctx, t, c)
		checkNamespacePolicy(ctx, t, c)
	})

	// A second install changes nothing.
	t.Run("a second install changes nothing", func(t *testing.T) {
		installAgent(t, c)
		if revs := releaseRevisions(ctx, t, c); len(revs) != 1 {
			t.Errorf("a second identical install made release records %v, want only revision 1", revs)
		}
		if got := identity(ctx, t, c)["clusterID"]; got != id["clusterID"] {
			t.Errorf("reinstall changed the cluster ID from %s to %s", id["clusterID"], got)
		}
	})

	// --set on reinstall upgrades, and upgrade works on the installed release.
	t.Run("install --set and upgrade change the release", func(t *testing.T) {
		installAgent(t, c, "--set", "sharingPercentage=30")
		mustOffload(t, c, append(append([]string{"upgrade"}, localcluster.AgentValues()...), "--set", "sharingPercentage=30", "--set", "auth.service.type=ClusterIP")...)
		svc, err := c.Kube.CoreV1().Services(localcluster.InstallNamespace).Get(ctx, "offload-auth", metav1.GetOptions{})
		if err != nil || svc.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("upgrade --set auth.service.type=ClusterIP: service %v, err %v", svc.Spec.Type, err)
		}
		if revs := releaseRevisions(ctx, t, c); len(revs) < 2 {
			t.Errorf("install --set did not upgrade: release records %v", revs)
		}
		if got := identity(ctx, t, c); got["clusterID"] != id["clusterID"] || got["clusterName"] != "inst" {
			t.Errorf("upgrade changed the identity from %v to %v", id, got)
		}
	})

	// uninstall refuses while a peer exists, names it, and changes nothing.
	t.Run("uninstall refuses while a peer exists", func(t *testing.T) {
		fc := &offloadv1alpha1.ForeignCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "peer-a"},
			Spec:       offloadv1alpha1.ForeignClusterSpec{ClusterID: "11111111-2222-4333-8444-555555555555", ClusterName: "peer-a"},
		}
		if err := cl.Create(ctx, fc); err != nil {
			t.Fatal(err)
		}
		_, errOut, err := offload(t, c, "uninstall")
		if err == nil || !strings.Contains(errOut, "peer-a") {
			t.Errorf("uninstall with a peer: err=%v, stderr %q; want a refusal naming peer-a", err, errOut)
		}
		for _, o := range objects {
			if !exists(ctx, t, cl, o) {
				t.Errorf("a refused uninstall removed %s", o)
			}
		}
		if err := cl.Delete(ctx, fc); err != nil {
			t.Fatal(err)
		}
	})

	// uninstall removes the release and keeps the identity and the CRDs.
	// The reinstall after it would prove nothing without it.
	if !t.Run("uninstall keeps the identity and the CRDs", func(t *testing.T) {
		mustOffload(t, c, "uninstall")
		for _, o := range objects {
			kept := o.gvk.Kind == "CustomResourceDefinition" || (o.gvk.Kind == "ConfigMap" && o.name == "offload-cluster-identity")
			if got := exists(ctx, t, cl, o); got != kept {
				t.Errorf("after uninstall, %s exists=%t, want %t", o, got, kept)
			}
		}
	}) {
		t.FailNow()
	}

	// A reinstall keeps the cluster ID.
	t.Run("a reinstall keeps the cluster ID", func(t *testing.T) {
		installAgent(t, c)
		if got := identity(ctx, t, c)["clusterID"]; got != id["clusterID"] {
			t.Errorf("install after uninstall changed the cluster ID from %s to %s", id["clusterID"], got)
		}
	})

	// uninstall --purge leaves nothing behind.
	t.Run("uninstall --purge leaves nothing behind", func(t *testing.T) {
		mustOffload(t, c, "uninstall", "--purge")
		for _, o := range objects {
			if exists(ctx, t, cl, o) {
				t.Errorf("after uninstall --purge, %s still exists", o)
			}
		}
		if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, localcluster.InstallNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace %s still exists after --purge (err=%v)", localcluster.InstallNamespace, err)
		}
		if revs := releaseRevisions(ctx, t, c); len(revs) != 0 {
			t.Errorf("release records left after --purge: %v", revs)
		}
	})
}

// checkRBAC asks the API server what each agent ServiceAccount may do.
func checkRBAC(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	type access struct {
		verb, group, resource, subresource, namespace string
		allowed                                       bool
	}
	cases := map[string][]access{
		"offload-controller-manager": {
			{"create", "", "nodes", "", "", true},
			{"update", "", "pods", "status", "", true},
			{"update", "offload.io", "foreignclusters", "status", "", true},
			{"create", "coordination.k8s.io", "leases", "", "kube-node-lease", true},
			{"get", "", "secrets", "", localcluster.InstallNamespace, true},
			{"get", "", "secrets", "", "default", false},
			{"list", "", "secrets", "", "", false},
			{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", false},
			// Virtual-kubelet work only: no pod is created or changed but
			// its status, no node changed but its status.
			{"create", "", "pods", "", "default", false},
			{"patch", "", "pods", "", "default", false},
			{"update", "", "nodes", "", "", false},
			// Allowed by RBAC, confined to twin namespaces by the
			// ValidatingAdmissionPolicy (checkNamespacePolicy).
			{"delete", "", "namespaces", "", "", true},
			{"bind", "rbac.authorization.k8s.io", "clusterroles", "", "", false},
			// Only EndpointSlice kubernetes, by name, in default.
			{"list", "discovery.k8s.io", "endpointslices", "", "default", false},
			// Gateway Deployments, never deleted by it (they go with their Tunnel).
			{"create", "apps", "deployments", "", localcluster.InstallNamespace, true},
			{"delete", "apps", "deployments", "", localcluster.InstallNamespace, false},
		},
		"offload-auth": {
			{"create", "offload.io", "tenants", "", "", true},
			{"create", "", "serviceaccounts", "token", "offload-tenant-x", true},
			{"create", "rbac.authorization.k8s.io", "rolebindings", "", "offload-tenant-x", true},
			// Of its namespace's Secrets only its CA, by name (below).
			{"get", "", "secrets", "", localcluster.InstallNamespace, false},
			{"list", "", "secrets", "", localcluster.InstallNamespace, false},
			// Peering tokens are ConfigMaps, made by the admin.
			{"update", "", "configmaps", "", localcluster.InstallNamespace, true},
			{"create", "", "configmaps", "", localcluster.InstallNamespace, false},
			{"get", "", "secrets", "", "default", false},
			{"list", "", "secrets", "", "", false},
			{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", false},
			{"create", "", "pods", "", "default", false},
			{"delete", "", "nodes", "", "", false},
			// Cluster ID claims, in its namespace only.
			{"create", "coordination.k8s.io", "leases", "", localcluster.InstallNamespace, true},
			{"create", "coordination.k8s.io", "leases", "", "default", false},
		},
	}
	for sa, accesses := range cases {
		for _, a := range accesses {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + localcluster.InstallNamespace + ":" + sa,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + localcluster.InstallNamespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace,
				},
			}}
			got, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != a.allowed {
				where := a.namespace
				if where == "" {
					where = "cluster-wide"
				}
				t.Errorf("%s: %s %s/%s %s (%s): allowed=%t, want %t", sa, a.verb, a.resource, a.subresource, a.group, where, got.Status.Allowed, a.allowed)
			}
		}
	}
	// The auth service reads its CA, and no other Secret of its namespace
	// (this cluster's peer kubeconfigs, its gateways' keys).
	for name, want := range map[string]bool{offloadv1alpha1.AuthCASecret: true, "offload-peer-provider-kubeconfig": false, "offload-gateway-provider": false} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + localcluster.InstallNamespace + ":offload-auth",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: localcluster.InstallNamespace, Name: name},
		}}
		got, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != want {
			t.Errorf("offload-auth: get secret %s/%s: allowed=%t, want %t", localcluster.InstallNamespace, name, got.Status.Allowed, want)
		}
	}
	// The auth service can bind only the tenant role.
	for role, want := range map[string]bool{"offload-tenant": true, "cluster-admin": false, "admin": false} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + localcluster.InstallNamespace + ":offload-auth",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: role},
		}}
		got, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != want {
			t.Errorf("offload-auth may bind %s: %t, want %t", role, got.Status.Allowed, want)
		}
	}
}

func TestInstallRejectsBadInputAndChangesNothing(t *testing.T) {
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "badin", FakeNodes: 1})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"an unknown provider", []string{"install", "--provider", "minikube"}, `unknown provider "minikube"`},
		{"a malformed pod CIDR", []string{"install", "--pod-cidr", "10.0.0.0/33"}, `invalid --pod-cidr "10.0.0.0/33"`},
		{"a malformed service CIDR", []string{"install", "--service-cidr", "ten"}, `invalid --service-cidr "ten"`},
		{"a cluster name that is not DNS-1123", []string{"install", "--cluster-name", "My_Cluster"}, `invalid --cluster-name "My_Cluster"`},
		{"an API server URL that is not https", []string{"install", "--api-server-url", "http://10.0.0.1:6443"}, `invalid --api-server-url`},
		{"a chart value the schema rejects", []string{"install", "--set", "auth.service.type=Ingress"}, "invalid chart values"},
		{"a user without rights", []string{"install", "--as", "nobody"}, "forbidden"},
		{"an unreachable cluster", []string{"install", "--server", "https://127.0.0.1:1"}, "cannot reach the cluster"},
		{"upgrade before install", []string{"upgrade"}, "not installed"},
		// Fake nodes carry no pod CIDR, so none is detected here.
		{"the network fabric without a pod CIDR", []string{"install", "--network"},
			"the network fabric (--network) needs this cluster's pod CIDR, which was not detected: pass --pod-cidr CIDR"},
		{"the network fabric turned on by value without a pod CIDR", []string{"install", "--set", "network.enabled=true"},
			"the network fabric (network.enabled value) needs this cluster's pod CIDR"},
		{"overlapping remap pools", []string{"install", "--pod-cidr", "10.244.0.0/16", "--set", "network.remapPools={10.64.0.0/12,10.70.0.0/16}"},
			"invalid network values: remap pools 10.64.0.0/12 and 10.70.0.0/16 overlap"},
		{"a gateway service type that is not NodePort or LoadBalancer", []string{"install", "--gateway-service-type", "ClusterIP"},
			`invalid --gateway-service-type "ClusterIP": want NodePort or LoadBalancer`},
		{"a gateway address that is no address", []string{"install", "--gateway-address", "vpn.example.com:http"},
			`invalid --gateway-address "vpn.example.com:http"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := offload(t, c, tc.args...)
			if err == nil {
				t.Fatalf("kubectl offload %v succeeded, want an error", tc.args)
			}
			if !strings.Contains(errOut, tc.want) || strings.Count(errOut, "Error:") != 1 {
				t.Errorf("stderr = %q, want one Error line containing %q", errOut, tc.want)
			}
			if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, localcluster.InstallNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("namespace %s exists after a rejected install (err=%v)", localcluster.InstallNamespace, err)
			}
			crds := &apiextensionsv1.CustomResourceDefinitionList{}
			if err := ctrlClient(t, c).List(ctx, crds); err != nil {
				t.Fatal(err)
			}
			for _, crd := range crds.Items {
				if crd.Spec.Group == "offload.io" {
					t.Errorf("CRD %s exists after a rejected install", crd.Name)
				}
			}
		})
	}
}

// checkNamespacePolicy acts as the controller-manager's ServiceAccount: it
// may create, label and delete twin namespaces, and on other namespaces
// change only the offloaded label, as the ValidatingAdmissionPolicy says.
func checkNamespacePolicy(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + localcluster.InstallNamespace + ":offload-controller-manager",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + localcluster.InstallNamespace, "system:authenticated"}}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The policy takes effect a moment after it is created.
	plain := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "not-a-twin"}}
	var createErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, createErr = sa.CoreV1().Namespaces().Create(ctx, plain, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(createErr) || apierrors.IsForbidden(createErr), nil
	}); err != nil {
		t.Fatalf("the controller-manager may create a namespace that is not a twin namespace: err=%v", createErr)
	}
	twin := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "twin-of-something", Labels: map[string]string{"offload.io/origin-cluster-id": "x"}}}
	if _, err := sa.CoreV1().Namespaces().Create(ctx, twin, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the controller-manager cannot create a twin namespace: %v", err)
	}
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"}}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), other.Name, metav1.DeleteOptions{})
	}()
	if err := sa.CoreV1().Namespaces().Delete(ctx, other.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Errorf("the controller-manager may delete namespace %s, which is not a twin namespace", other.Name)
	}
	label := func(patch string) error {
		_, err := sa.CoreV1().Namespaces().Patch(ctx, other.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := label(`{"metadata":{"labels":{"offload.io/offloaded":"true"}}}`); err != nil {
		t.Errorf("the controller-manager cannot set the offloaded label: %v", err)
	}
	if err := label(`{"metadata":{"labels":{"offload.io/origin-cluster-id":"x"}}}`); err == nil {
		t.Errorf("the controller-manager may turn namespace %s into a twin namespace", other.Name)
	}
	if err := label(`{"metadata":{"labels":{"team":"x"}}}`); err == nil {
		t.Errorf("the controller-manager may change other labels of namespace %s", other.Name)
	}
	if err := sa.CoreV1().Namespaces().Delete(ctx, twin.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the controller-manager cannot delete a twin namespace: %v", err)
	}

	// It revokes a consumer by deleting its ServiceAccount offload-consumer
	// in its tenant namespace (offload-tenant-revocation), and no other.
	tenantNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "offload-tenant-policy-check", Labels: map[string]string{"offload.io/tenant": "x"}}}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, tenantNS, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), tenantNS.Name, metav1.DeleteOptions{})
	}()
	for _, o := range []struct {
		ns, name string
		allowed  bool
	}{
		{tenantNS.Name, "offload-consumer", true},
		{tenantNS.Name, "someone", false},
		{other.Name, "offload-consumer", false},
	} {
		if _, err := c.Kube.CoreV1().ServiceAccounts(o.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: o.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var err error
		// The policy takes effect a moment after it is created.
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err = sa.CoreV1().ServiceAccounts(o.ns).Delete(ctx, o.name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			return (err == nil) == o.allowed, nil
		})
		if (err == nil) != o.allowed {
			t.Errorf("the controller-manager deleting ServiceAccount %s/%s: err=%v, want allowed=%v", o.ns, o.name, err, o.allowed)
		}
	}
}
