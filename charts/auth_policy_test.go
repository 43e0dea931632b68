package charts_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// authPolicyName is the chart's ValidatingAdmissionPolicy, and its binding,
// that confine the auth service to tenant namespaces.
const authPolicyName = "offload-auth-scope"

// authRefusal is what every refusal of the policy says.
const authRefusal = "the auth service may only provision tenant namespaces"

// A refusal is something the auth service's identity tries outside tenant
// namespaces: do does it, and unchanged checks, as the admin, that it left
// no trace; it is given what do returned.
type refusal struct {
	name      string
	do        func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error)
	inMessage string
	unchanged func(t *testing.T, got runtime.Object)
}

func TestTheAuthServiceIsConfinedToTenantNamespaces(t *testing.T) {
	s := enforcedAuthPolicy(t)
	admin := s.admin
	// Fixtures, made by the admin: a namespace of no tenant with the
	// consumer's objects in it, a tenant namespace with another
	// ServiceAccount, and a ClusterRole that grants only what the auth
	// service's own ClusterRole does, which RBAC would let it bind.
	plain := createNamespace(t, admin, "plain-"+rand.String(6), nil)
	createServiceAccount(t, admin, plain, "default")
	createServiceAccount(t, admin, plain, offloadv1alpha1.ConsumerServiceAccount)
	createRoleBinding(t, admin, plain, offloadv1alpha1.TenantRole, offloadv1alpha1.TenantRole)
	createServiceAccount(t, admin, s.release, "default")
	tenant := createNamespace(t, admin, offloadv1alpha1.TenantNamespace("c"+rand.String(6)), map[string]string{offloadv1alpha1.LabelTenant: "x"})
	createServiceAccount(t, admin, tenant, "intruder")
	reader, err := admin.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "namespace-reader-"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoles().Delete(context.WithoutCancel(t.Context()), reader.Name, metav1.DeleteOptions{})
	})

	gone := func(get func(context.Context) error) func(*testing.T, runtime.Object) {
		return func(t *testing.T, _ runtime.Object) {
			if err := get(t.Context()); !apierrors.IsNotFound(err) {
				t.Errorf("the refused object exists (get: %v)", err)
			}
		}
	}
	kept := func(get func(context.Context) (metav1.Object, error)) func(*testing.T, runtime.Object) {
		return func(t *testing.T, _ runtime.Object) {
			o, err := get(t.Context())
			if err != nil {
				t.Fatalf("the object the refused request would have deleted: %v", err)
			}
			if o.GetDeletionTimestamp() != nil {
				t.Errorf("%s is being deleted after a refused request", o.GetName())
			}
		}
	}
	noToken := func(t *testing.T, got runtime.Object) {
		if tr, ok := got.(*authenticationv1.TokenRequest); ok && tr.Status.Token != "" {
			t.Errorf("a refused token request returned a token")
		}
	}
	namespace := func(name string) func(context.Context) (metav1.Object, error) {
		return func(ctx context.Context) (metav1.Object, error) {
			return admin.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		}
	}
	createSA := func(ns, name string) func(context.Context, kubernetes.Interface) (runtime.Object, error) {
		return func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
			return auth.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		}
	}
	mint := func(ns, name string) func(context.Context, kubernetes.Interface) (runtime.Object, error) {
		return func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
			return auth.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		}
	}
	getSA := func(ns, name string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		}
	}
	createRB := func(ns, name, role string) func(context.Context, kubernetes.Interface) (runtime.Object, error) {
		return func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
			return auth.RbacV1().RoleBindings(ns).Create(ctx, tenantRoleBinding(ns, name, role), metav1.CreateOptions{})
		}
	}
	getRB := func(ns, name string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := admin.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		}
	}

	for _, tc := range []refusal{
		{
			name: "creating namespace victim-x is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				return auth.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "victim-x"}}, metav1.CreateOptions{})
			},
			inMessage: "create namespace victim-x:",
			unchanged: gone(func(ctx context.Context) error {
				_, err := admin.CoreV1().Namespaces().Get(ctx, "victim-x", metav1.GetOptions{})
				return err
			}),
		},
		{
			name: "creating a namespace named by generateName victim- is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				return auth.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "victim-"}}, metav1.CreateOptions{})
			},
			inMessage: "create namespace victim-",
			unchanged: func(t *testing.T, _ runtime.Object) {
				list, err := admin.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, ns := range list.Items {
					if strings.HasPrefix(ns.Name, "victim-") {
						t.Errorf("namespace %s exists after a refused create", ns.Name)
					}
				}
			},
		},
		{
			name: "deleting a namespace of no tenant is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				return nil, auth.CoreV1().Namespaces().Delete(ctx, plain, metav1.DeleteOptions{})
			},
			inMessage: "delete namespace " + plain + ":",
			unchanged: kept(namespace(plain)),
		},
		{
			name: "deleting its own release namespace is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				return nil, auth.CoreV1().Namespaces().Delete(ctx, s.release, metav1.DeleteOptions{})
			},
			inMessage: "delete namespace " + s.release + ":",
			unchanged: kept(namespace(s.release)),
		},
		{
			name:      "creating ServiceAccount offload-consumer in a namespace of no tenant is refused",
			do:        createSA(s.release, offloadv1alpha1.ConsumerServiceAccount),
			inMessage: "create ServiceAccount " + s.release + "/" + offloadv1alpha1.ConsumerServiceAccount + ":",
			unchanged: gone(getSA(s.release, offloadv1alpha1.ConsumerServiceAccount)),
		},
		{
			name:      "creating another ServiceAccount than offload-consumer in a tenant namespace is refused",
			do:        createSA(tenant, "intruder-2"),
			inMessage: "create ServiceAccount " + tenant + "/intruder-2:",
			unchanged: gone(getSA(tenant, "intruder-2")),
		},
		{
			name: "deleting ServiceAccount offload-consumer in a namespace of no tenant is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				return nil, auth.CoreV1().ServiceAccounts(plain).Delete(ctx, offloadv1alpha1.ConsumerServiceAccount, metav1.DeleteOptions{})
			},
			inMessage: "delete ServiceAccount " + plain + "/" + offloadv1alpha1.ConsumerServiceAccount + ":",
			unchanged: kept(func(ctx context.Context) (metav1.Object, error) {
				return admin.CoreV1().ServiceAccounts(plain).Get(ctx, offloadv1alpha1.ConsumerServiceAccount, metav1.GetOptions{})
			}),
		},
		{
			name:      "minting a token for ServiceAccount default in a namespace of no tenant is refused",
			do:        mint(plain, "default"),
			inMessage: "mint a token for ServiceAccount " + plain + "/default:",
			unchanged: noToken,
		},
		{
			name:      "minting a token for its own ServiceAccount offload-auth is refused",
			do:        mint(s.release, "offload-auth"),
			inMessage: "mint a token for ServiceAccount " + s.release + "/offload-auth:",
			unchanged: noToken,
		},
		{
			name:      "minting a token for ServiceAccount offload-consumer in a namespace of no tenant is refused",
			do:        mint(plain, offloadv1alpha1.ConsumerServiceAccount),
			inMessage: "mint a token for ServiceAccount " + plain + "/" + offloadv1alpha1.ConsumerServiceAccount + ":",
			unchanged: noToken,
		},
		{
			name:      "minting a token for another ServiceAccount than offload-consumer in a tenant namespace is refused",
			do:        mint(tenant, "intruder"),
			inMessage: "mint a token for ServiceAccount " + tenant + "/intruder:",
			unchanged: noToken,
		},
		{
			name:      "creating a RoleBinding to ClusterRole offload-tenant in a namespace of no tenant is refused",
			do:        createRB(s.release, "granted", offloadv1alpha1.TenantRole),
			inMessage: "create RoleBinding " + s.release + "/granted:",
			unchanged: gone(getRB(s.release, "granted")),
		},
		{
			name: "deleting a RoleBinding in a namespace of no tenant is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				return nil, auth.RbacV1().RoleBindings(plain).Delete(ctx, offloadv1alpha1.TenantRole, metav1.DeleteOptions{})
			},
			inMessage: "delete RoleBinding " + plain + "/" + offloadv1alpha1.TenantRole + ":",
			unchanged: kept(func(ctx context.Context) (metav1.Object, error) {
				return admin.RbacV1().RoleBindings(plain).Get(ctx, offloadv1alpha1.TenantRole, metav1.GetOptions{})
			}),
		},
		{
			// RBAC's escalation check admits it: the auth service holds
			// every permission of that ClusterRole.
			name:      "creating a RoleBinding in a tenant namespace to another ClusterRole than offload-tenant is refused",
			do:        createRB(tenant, "reader", reader.Name),
			inMessage: "create RoleBinding " + tenant + "/reader to ClusterRole " + reader.Name + ":",
			unchanged: gone(getRB(tenant, "reader")),
		},
		{
			name: "binding ClusterRole offload-tenant to another subject than the namespace's consumer is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				rb := tenantRoleBinding(tenant, "elsewhere", offloadv1alpha1.TenantRole)
				rb.Subjects[0].Namespace = "kube-system"
				return auth.RbacV1().RoleBindings(tenant).Create(ctx, rb, metav1.CreateOptions{})
			},
			inMessage: "create RoleBinding " + tenant + "/elsewhere:",
			unchanged: gone(getRB(tenant, "elsewhere")),
		},
		{
			name: "creating another ResourceQuota than offload-tenant-budget in a tenant namespace is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				return auth.CoreV1().ResourceQuotas(tenant).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "starve"}}, metav1.CreateOptions{})
			},
			inMessage: "create ResourceQuota " + tenant + "/starve:",
			unchanged: gone(func(ctx context.Context) error {
				_, err := admin.CoreV1().ResourceQuotas(tenant).Get(ctx, "starve", metav1.GetOptions{})
				return err
			}),
		},
		{
			name: "creating the budget in a namespace of no tenant is refused",
			do: func(ctx context.Context, auth kubernetes.Interface) (runtime.Object, error) {
				return auth.CoreV1().ResourceQuotas(plain).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantBudgetName}}, metav1.CreateOptions{})
			},
			inMessage: "create ResourceQuota " + plain + "/" + offloadv1alpha1.TenantBudgetName + ":",
			unchanged: gone(func(ctx context.Context) error {
				_, err := admin.CoreV1().ResourceQuotas(plain).Get(ctx, offloadv1alpha1.TenantBudgetName, metav1.GetOptions{})
				return err
			}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.do(t.Context(), s.auth)
			if !apierrors.IsForbidden(err) {
				t.Fatalf("got %v, want it forbidden", err)
			}
			for _, want := range []string{authPolicyName, tc.inMessage, authRefusal} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not say %q", err, want)
				}
			}
			tc.unchanged(t, got)
		})
	}
}

// The auth service provisions a tenant as internal/agent/provider/auth does (peer)
// and removes it as it does when a peering fails or on unpeer.
func TestTheAuthServiceProvisionsAndRemovesATenant(t *testing.T) {
	s := enforcedAuthPolicy(t)
	ctx, auth := t.Context(), s.auth
	ns := offloadv1alpha1.TenantNamespace("c" + rand.String(6))
	sa := offloadv1alpha1.ConsumerServiceAccount

	if _, err := auth.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{offloadv1alpha1.LabelTenant: "x"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the tenant namespace: %v", err)
	}
	if _, err := auth.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("reading the tenant namespace: %v", err)
	}
	if _, err := auth.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the consumer's ServiceAccount: %v", err)
	}
	if _, err := auth.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		t.Fatalf("reading the consumer's ServiceAccount: %v", err)
	}
	tr, err := auth.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting the consumer's token: %v", err)
	}
	// /v1/refresh authenticates the consumer by that token.
	review, err := auth.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("reviewing the consumer's token: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":" + sa; !review.Status.Authenticated || review.Status.User.Username != want {
		t.Errorf("the consumer's token authenticates %t as %q, want %q", review.Status.Authenticated, review.Status.User.Username, want)
	}
	if _, err := auth.RbacV1().RoleBindings(ns).Create(ctx, tenantRoleBinding(ns, offloadv1alpha1.TenantRole, offloadv1alpha1.TenantRole), metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding ClusterRole %s: %v", offloadv1alpha1.TenantRole, err)
	}
	if _, err := auth.RbacV1().RoleBindings(ns).Get(ctx, offloadv1alpha1.TenantRole, metav1.GetOptions{}); err != nil {
		t.Fatalf("reading the RoleBinding: %v", err)
	}
	budget := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantBudgetName},
		Spec: corev1.ResourceQuotaSpec{Hard: offloadv1alpha1.TenantBudget()}}
	if _, err := auth.CoreV1().ResourceQuotas(ns).Create(ctx, budget, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the tenant's budget: %v", err)
	}
	if err := auth.CoreV1().ResourceQuotas(ns).Delete(ctx, budget.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the tenant's budget (undoing a failed peering): %v", err)
	}

	background := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	if err := auth.RbacV1().RoleBindings(ns).Delete(ctx, offloadv1alpha1.TenantRole, background); err != nil {
		t.Fatalf("deleting the RoleBinding: %v", err)
	}
	if err := auth.CoreV1().ServiceAccounts(ns).Delete(ctx, sa, background); err != nil {
		t.Fatalf("deleting the consumer's ServiceAccount: %v", err)
	}
	if err := auth.CoreV1().Namespaces().Delete(ctx, ns, background); err != nil {
		t.Fatalf("deleting the tenant namespace: %v", err)
	}
	if _, err := s.admin.RbacV1().RoleBindings(ns).Get(ctx, offloadv1alpha1.TenantRole, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the RoleBinding exists after its deletion (get: %v)", err)
	}
	if _, err := s.admin.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ServiceAccount exists after its deletion (get: %v)", err)
	}
	// The test API server runs no namespace controller: the namespace stays
	// Terminating.
	if got, err := s.admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && got.DeletionTimestamp == nil {
		t.Errorf("the tenant namespace is not being deleted")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func TestTheAuthScopePolicyLeavesAdminsAlone(t *testing.T) {
	s := enforcedAuthPolicy(t)
	ctx, admin := t.Context(), s.admin
	createServiceAccount(t, admin, s.release, "admin-bot")
	tr, err := admin.CoreV1().ServiceAccounts(s.release).CreateToken(ctx, "admin-bot", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil || tr.Status.Token == "" {
		t.Fatalf("the admin mints no token for a ServiceAccount of the release namespace: %v", err)
	}
	ns := createNamespace(t, admin, "victim-admin-"+rand.String(6), nil)
	createRoleBinding(t, admin, ns, "granted", offloadv1alpha1.TenantRole)
	if err := admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the admin cannot delete a namespace of no tenant: %v", err)
	}
}

// authScope is the test API server with the chart's auth policy and the
// auth service's RBAC, rendered for release namespace release.
type authScope struct {
	release     string
	admin, auth kubernetes.Interface
	// authConfig is auth's client configuration.
	authConfig *rest.Config
}

var authPolicy struct {
	once  sync.Once
	scope authScope
	err   error
}

// enforcedAuthPolicy applies, once per test process, the chart's policy
// authPolicyName and the RBAC of the auth service, rendered for a new
// release namespace, and returns clients for the admin and for the auth
// service's ServiceAccount there, once the policy is enforced.
func enforcedAuthPolicy(t *testing.T) authScope {
	t.Helper()
	admin, err := kubernetes.NewForConfig(envtest.APIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	authPolicy.once.Do(func() { authPolicy.scope, authPolicy.err = applyAuthPolicy(t, admin) })
	if authPolicy.err != nil {
		t.Fatal(authPolicy.err)
	}
	return authPolicy.scope
}

func applyAuthPolicy(t *testing.T, admin kubernetes.Interface) (authScope, error) {
	ctx := t.Context()
	ns, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "release-"}}, metav1.CreateOptions{})
	if err != nil {
		return authScope{}, err
	}
	release := ns.Name
	objs, err := renderIn(release, map[string]any{"clusterName": "test"})
	if err != nil {
		return authScope{}, err
	}
	var (
		policy      admissionregistrationv1.ValidatingAdmissionPolicy
		binding     admissionregistrationv1.ValidatingAdmissionPolicyBinding
		authRole    rbacv1.ClusterRole
		authBinding rbacv1.ClusterRoleBinding
		tenantRole  rbacv1.ClusterRole
		authSA      corev1.ServiceAccount
		localRole   rbacv1.Role
		localRB     rbacv1.RoleBinding
	)
	if err := fromRendered(objs, map[string]any{
		"ValidatingAdmissionPolicy/" + authPolicyName:        &policy,
		"ValidatingAdmissionPolicyBinding/" + authPolicyName: &binding,
		"ClusterRole/offload-auth":                           &authRole,
		"ClusterRoleBinding/offload-auth":                    &authBinding,
		"ClusterRole/" + offloadv1alpha1.TenantRole:          &tenantRole,
		"ServiceAccount/offload-auth":                        &authSA,
		"Role/offload-auth":                                  &localRole,
		"RoleBinding/offload-auth":                           &localRB,
	}); err != nil {
		return authScope{}, err
	}
	created, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &policy, metav1.CreateOptions{})
	if err != nil {
		return authScope{}, fmt.Errorf("creating the policy: %w", err)
	}
	if err := typeCheck(admin, created); err != nil {
		return authScope{}, err
	}
	for what, create := range map[string]func() error{
		"the policy binding": func() error {
			_, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &binding, metav1.CreateOptions{})
			return err
		},
		"ClusterRole offload-auth": func() error {
			_, err := admin.RbacV1().ClusterRoles().Create(ctx, &authRole, metav1.CreateOptions{})
			return err
		},
		"ClusterRoleBinding offload-auth": func() error {
			_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &authBinding, metav1.CreateOptions{})
			return err
		},
		"ClusterRole offload-tenant": func() error {
			_, err := admin.RbacV1().ClusterRoles().Create(ctx, &tenantRole, metav1.CreateOptions{})
			return err
		},
		"ServiceAccount offload-auth": func() error {
			_, err := admin.CoreV1().ServiceAccounts(release).Create(ctx, &authSA, metav1.CreateOptions{})
			return err
		},
		"Role offload-auth": func() error {
			_, err := admin.RbacV1().Roles(release).Create(ctx, &localRole, metav1.CreateOptions{})
			return err
		},
		"RoleBinding offload-auth": func() error {
			_, err := admin.RbacV1().RoleBindings(release).Create(ctx, &localRB, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil {
			return authScope{}, fmt.Errorf("creating %s: %w", what, err)
		}
	}

	cfg := rest.CopyConfig(envtest.APIServer(t))
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + release + ":offload-auth",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + release, "system:authenticated"},
	}
	auth, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return authScope{}, err
	}
	// The probe is refused by the policy once the API server enforces both
	// the policy and the RBAC: admission runs only after authorization.
	probe := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "victim-probe"}}
	if _, err := framework.Poll(ctx, 100*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, string) {
		_, err := auth.CoreV1().Namespaces().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(fmt.Sprint(err), authPolicyName), fmt.Sprint(err)
	}); err != nil {
		return authScope{}, fmt.Errorf("the policy is not enforced: %w", err)
	}
	// The impersonated identity has only the chart's RBAC.
	if _, err := auth.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		return authScope{}, fmt.Errorf("the auth service lists Secrets of kube-system (error %v): RBAC is not enforced", err)
	}
	return authScope{release: release, admin: admin, auth: auth, authConfig: cfg}, nil
}

// renderIn renders the embedded chart with vals for release namespace ns,
// as `helm template -n ns` would, and returns its objects by "Kind/name".
func renderIn(ns string, vals map[string]any) (map[string]map[string]any, error) {
	c, err := charts.Load("v0.0.0-test")
	if err != nil {
		return nil, err
	}
	values, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: "offload", Namespace: ns, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(c, values)
	if err != nil {
		return nil, err
	}
	objs := map[string]map[string]any{}
	for name, doc := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for part := range strings.SplitSeq(doc, "\n---") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(part), &o); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if o == nil || o["kind"] == nil {
				continue
			}
			objs[o["kind"].(string)+"/"+o["metadata"].(map[string]any)["name"].(string)] = o
		}
	}
	return objs, nil
}

func createNamespace(t *testing.T, kube kubernetes.Interface, name string, labels map[string]string) string {
	t.Helper()
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func createServiceAccount(t *testing.T, kube kubernetes.Interface, ns, name string) {
	t.Helper()
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createRoleBinding(t *testing.T, kube kubernetes.Interface, ns, name, role string) {
	t.Helper()
	if _, err := kube.RbacV1().RoleBindings(ns).Create(t.Context(), tenantRoleBinding(ns, name, role), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// tenantRoleBinding binds ClusterRole role to the consumer's ServiceAccount
// in ns, as the auth service does.
func tenantRoleBinding(ns, name, role string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns}},
	}
}
