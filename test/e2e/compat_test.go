package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// compatPair is the pair of Kubernetes versions TestCompatibility runs on:
// OFFLOAD_COMPAT_CONSUMER and OFFLOAD_COMPAT_PROVIDER (make compat sets
// them for each pair of the matrix), by default the consumer on
// KUBE_SKEW_VERSION and the provider on the pinned KUBE_VERSION: the skewed
// pair the test suite, and so CI, runs on every change. The newest pair is
// the rest of the suite. The older consumer is the one of the two that
// runs the scheduling webhook rather than the MutatingAdmissionPolicy, so
// CI runs both.
func compatPair(t *testing.T) (consumer, provider string) {
	t.Helper()
	versions, err := tools.Versions()
	if err != nil {
		t.Fatal(err)
	}
	consumer, provider = versions["KUBE_SKEW_VERSION"], versions["KUBE_VERSION"]
	if v := os.Getenv("OFFLOAD_COMPAT_CONSUMER"); v != "" {
		consumer = v
	}
	if v := os.Getenv("OFFLOAD_COMPAT_PROVIDER"); v != "" {
		provider = v
	}
	return consumer, provider
}

// TestCompatibility runs the product's main path on a consumer and a
// provider of the given Kubernetes versions, one subtest per check, which
// hack/compat turns into a row of docs/compatibility.md: install, the
// scheduling mutation install chose (webhook or admission policy), peer,
// offload a namespace, logs and exec of a remote pod, a Service answered
// across the fabric, a DaemonSet kept off the virtual node, a privileged
// pod refused by the provider, no deprecated API requested, unpeer, and
// uninstall with nothing left. A
// check whose predecessor failed is skipped, not failed again.
func TestCompatibility(t *testing.T) {
	consumerVersion, providerVersion := compatPair(t)
	t.Logf("consumer on Kubernetes %s, provider on %s", consumerVersion, providerVersion)
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// Isolated, so that only the fabric carries pod traffic between them.
	clusters := localcluster.StartClusters(t,
		localcluster.ClusterOptions{Name: "consumer", KubeVersion: consumerVersion, RealNode: true, Isolated: true},
		localcluster.ClusterOptions{Name: "provider", KubeVersion: providerVersion, RealNode: true, Isolated: true})
	consumer, provider := clusters[0], clusters[1]
	cc, pc := ctrlClient(t, consumer), ctrlClient(t, provider)

	failed := ""
	check := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			if failed != "" {
				t.Skipf("check %q failed", failed)
			}
			f(t)
		})
		if failed == "" && ctx.Err() == nil && t.Failed() {
			failed = name
		}
	}

	var objects []object
	check("install", func(t *testing.T) {
		for c, want := range map[*localcluster.Cluster]string{consumer: consumerVersion, provider: providerVersion} {
			v, err := c.Kube.Discovery().ServerVersion()
			if err != nil || v.GitVersion != want {
				t.Fatalf("%s's API server is %v (%v); want Kubernetes %s", c.Name, v, err, want)
			}
			if n, err := c.Kube.CoreV1().Nodes().Get(ctx, c.Node.Name, metav1.GetOptions{}); err != nil || n.Status.NodeInfo.KubeletVersion != want {
				t.Fatalf("%s's real node: %v; want a kubelet of %s", c.Name, err, want)
			}
		}
		objects = manifestObjects(t, mustOffload(t, consumer, append([]string{"install", "--cluster-name", consumer.Name, "--dry-run", "-o", "yaml"}, localcluster.AgentValues()...)...))
		installPeerable(ctx, t, consumer, provider)
	})

	check("scheduling mutation", func(t *testing.T) {
		expectSchedulingMutation(ctx, t, consumer)
	})

	check("peer", func(t *testing.T) {
		if errOut, err := outOfBand(t, consumer, generate(t, provider), "--timeout", "2m"); err != nil {
			t.Fatalf("peer out-of-band: %v\n%s", err, errOut)
		}
		waitFor(ctx, t, 2*time.Minute, "the virtual node Ready, reporting the provider's version, and NetworkReady on both sides", func(ctx context.Context) (bool, string) {
			n, err := consumer.Kube.CoreV1().Nodes().Get(ctx, "offload-provider", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ready := nodeReady(ctx, consumer, n.Name) == corev1.ConditionTrue
			if !ready || n.Status.NodeInfo.KubeletVersion != providerVersion {
				return false, fmt.Sprintf("virtual node Ready=%t, kubelet version %q", ready, n.Status.NodeInfo.KubeletVersion)
			}
			for c, name := range map[client.Client]string{cc: "provider", pc: "consumer"} {
				var fc offloadv1alpha1.ForeignCluster
				if err := c.Get(ctx, client.ObjectKey{Name: name}, &fc); err != nil {
					return false, err.Error()
				}
				if !meta.IsStatusConditionTrue(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady) {
					return false, fmt.Sprintf("ForeignCluster %s: network %s", name, fc.Status.Network)
				}
			}
			return true, ""
		})
	})

	var twin string
	var local, remote corev1.Pod
	check("offload", func(t *testing.T) {
		createNamespace(ctx, t, cc, "compat")
		mustOffload(t, consumer, "namespace", "compat", "--timeout", "2m")
		web := offloadedApp("web", 1)
		web.Spec.Template.Spec.NodeSelector = map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}
		for _, d := range []*appsv1.Deployment{web, testAppDeployment("client", 1)} {
			if _, err := consumer.Kube.AppsV1().Deployments("compat").Create(ctx, d, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "compat"}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}}}
		if _, err := consumer.Kube.CoreV1().Services("compat").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		local = waitPodsReady(ctx, t, consumer, "compat", "app=web", 1)[0]
		twin = offloadv1alpha1.TwinNamespace("compat", consumer.Name, identity(ctx, t, consumer)["clusterID"])
		remote = waitPodsReady(ctx, t, provider, twin, "app=web", 1)[0]
		if local.Spec.NodeName != "offload-provider" || remote.Spec.NodeName != provider.Node.Name {
			t.Errorf("pod web runs on %q on the consumer and %q on the provider; want the virtual node and the provider's real node", local.Spec.NodeName, remote.Spec.NodeName)
		}
	})

	check("logs and exec", func(t *testing.T) {
		if logs, err := kubectl(t, consumer, "-n", "compat", "logs", local.Name); err != nil || !strings.Contains(logs, "listening on") {
			t.Errorf("kubectl logs of the offloaded pod: err=%v, output %q; want the application's first line", err, logs)
		}
		if out, err := execIn(t, consumer, "compat", local.Name, "get", "http://127.0.0.1:8080/hostname"); err != nil || out != local.Name {
			t.Errorf("kubectl exec in the offloaded pod: err=%v, output %q; want its host name %s", err, out, local.Name)
		}
	})

	check("service across the fabric", func(t *testing.T) {
		var tunnel offloadv1alpha1.Tunnel
		if err := cc.Get(ctx, client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, "provider")}, &tunnel); err != nil {
			t.Fatal(err)
		}
		addrs := reflection.AddressesOf(&tunnel)
		clientPod := waitPodsReady(ctx, t, consumer, "compat", "app=client", 1)[0]
		// The server sees the client at its address in the provider's view
		// of the consumer: only the two gateways' translation makes it.
		want := remote.Name + " " + (&reflection.Addresses{Provider: addrs.Consumer}).ConsumerIP(clientPod.Status.PodIP)
		waitFor(ctx, t, time.Minute, "Service web answering a consumer pod from the provider", func(ctx context.Context) (bool, string) {
			out, err := execIn(t, consumer, "compat", clientPod.Name, "get", "http://web:8080/whoami")
			return err == nil && out == want, fmt.Sprintf("answer %q, %v; want %q", out, err, want)
		})
	})

	check("daemonset kept off", func(t *testing.T) {
		createDaemonSet(ctx, t, consumer, "compat", everywhere("agent", nil))
		rolledOut(t, consumer, "compat", "agent")
		if nodes := daemonPodsOn(ctx, t, consumer, "compat", "agent"); len(nodes) != 1 || nodes[0] != consumer.Node.Name {
			t.Errorf("the DaemonSet's pods are on %v; want the consumer's real node alone", nodes)
		}
		if pods, err := provider.Kube.CoreV1().Pods(twin).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"}); err != nil || len(pods.Items) != 0 {
			t.Errorf("DaemonSet pods in the twin namespace: %v, %v; want none", pods, err)
		}
	})

	check("privileged pod refused", func(t *testing.T) {
		p := harmlessPod("privileged", "compat")
		p.Spec.NodeSelector = map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		if _, err := consumer.Kube.CoreV1().Pods("compat").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 2*time.Minute, "the privileged pod refused by the provider, saying why", func(ctx context.Context) (bool, string) {
			got, err := consumer.Kube.CoreV1().Pods("compat").Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return got.Status.Phase == corev1.PodPending && got.Status.Reason == "ProviderFailed" && strings.Contains(got.Status.Message, "baseline"),
				fmt.Sprintf("node %q, phase %s, reason %q, message %q", got.Spec.NodeName, got.Status.Phase, got.Status.Reason, got.Status.Message)
		})
		if pods, err := provider.Kube.CoreV1().Pods(twin).List(ctx, metav1.ListOptions{LabelSelector: "attack=privileged"}); err != nil || len(pods.Items) != 0 {
			t.Errorf("the privileged pod exists on the provider: %v, %v", pods, err)
		}
	})

	// An API server answers a request for an API it deprecates with a
	// warning, which client-go and controller-runtime log: by now the
	// agents have used everything they use on this path. (Its
	// apiserver_requested_deprecated_apis metric cannot say who asked:
	// kube-controller-manager itself still writes core v1 Endpoints.)
	check("no deprecated API", func(t *testing.T) {
		for _, c := range clusters {
			pods, err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				for _, ctr := range p.Spec.Containers {
					logs, err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name}).DoRaw(ctx)
					if err != nil {
						t.Fatalf("reading the logs of %s/%s on %s: %v", p.Name, ctr.Name, c.Name, err)
					}
					for line := range strings.Lines(string(logs)) {
						if strings.Contains(line, " is deprecated in v1.") {
							t.Errorf("%s/%s on %s used an API its Kubernetes %s deprecates: %s", p.Name, ctr.Name, c.Name, map[*localcluster.Cluster]string{consumer: consumerVersion, provider: providerVersion}[c], strings.TrimSpace(line))
						}
					}
				}
			}
		}
	})

	check("unpeer", func(t *testing.T) {
		mustOffload(t, consumer, "unpeer", "provider", "--timeout", "2m")
		waitFor(ctx, t, time.Minute, "the virtual node gone", func(ctx context.Context) (bool, string) {
			_, err := consumer.Kube.CoreV1().Nodes().Get(ctx, "offload-provider", metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("get node offload-provider: %v", err)
		})
		expectNoPeeringLeft(ctx, t, consumer, provider, "provider")
		for _, c := range clusters {
			expectNoNetworkLeft(ctx, t, c)
		}
	})

	check("uninstall leaves nothing", func(t *testing.T) {
		mustOffload(t, consumer, "unoffload", "namespace", "compat", "--timeout", "2m")
		for _, c := range clusters {
			mustOffload(t, c, "uninstall", "--purge", "--timeout", "2m")
			for _, o := range objects {
				if exists(ctx, t, ctrlClient(t, c), o) {
					t.Errorf("after uninstall --purge on %s, %s still exists", c.Name, o)
				}
			}
			if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, localcluster.InstallNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("namespace %s is left on %s (err=%v)", localcluster.InstallNamespace, c.Name, err)
			}
		}
	})
}
