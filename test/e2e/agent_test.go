package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

func TestAgentRunsAsPodsOnARealNode(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "agent", FakeNodes: 2, RealNode: true})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	installAgent(t, c)

	// The chapters, each a subtest that reports on its own.
	t.Run("the agent runs as pods on the real node", func(t *testing.T) {
		for _, component := range []string{"controller-manager", "auth"} {
			pods := waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component="+component, 1)
			if pods[0].Spec.NodeName != c.Node.Name {
				t.Errorf("%s runs on %s, want the real node %s", component, pods[0].Spec.NodeName, c.Node.Name)
			}
			for _, s := range pods[0].Status.ContainerStatuses {
				if !s.Ready || s.State.Running == nil {
					t.Errorf("%s container %s is not running and ready: %+v", component, s.Name, s.State)
				}
			}
		}
	})

	// status is healthy because the agent is.
	t.Run("status is healthy", func(t *testing.T) {
		out := mustOffload(t, c, "status", "-o", "json")
		if h := jsonBool(t, out, "healthy"); !h {
			t.Errorf("status is not healthy with the agent running:\n%s", out)
		}
	})

	// A killed agent pod is recreated and becomes ready again.
	t.Run("a killed agent pod is replaced", func(t *testing.T) {
		old := waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component=auth", 1)[0]
		if err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=auth"})
			if err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				if p.Name == old.Name || p.DeletionTimestamp != nil {
					continue
				}
				for _, cond := range p.Status.Conditions {
					if cond.Type == "Ready" && cond.Status == "True" {
						return true, nil
					}
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("the auth pod was not replaced by a ready one: %v", err)
		}
		mustOffload(t, c, "status", "--wait", "--timeout", "2m")
	})
}

func TestAuthServiceAnswersAnotherClusterThroughItsNodePort(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	// Isolated as separate machines: only node addresses reach across.
	clusters := localcluster.StartClusters(t,
		localcluster.ClusterOptions{Name: "consumer", FakeNodes: 1, RealNode: true, Isolated: true},
		localcluster.ClusterOptions{Name: "provider", FakeNodes: 1, RealNode: true, Isolated: true},
	)
	consumer, provider := clusters[0], clusters[1]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	installAgent(t, provider)
	authPod := waitPodsReady(ctx, t, provider, localcluster.InstallNamespace, "app.kubernetes.io/component=auth", 1)[0]
	svc, err := provider.Kube.CoreV1().Services(localcluster.InstallNamespace).Get(ctx, "offload-auth", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	target := fmt.Sprintf("https://%s:%d/healthz", provider.Node.IP, nodePort)

	if _, err := consumer.Kube.AppsV1().Deployments("default").Create(ctx, testAppDeployment("caller", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitPodsReady(ctx, t, consumer, "default", "app=caller", 1)[0]
	// The forward serves both chapters: it stops when the test ends.
	addr := portForward(t, consumer, "default", "pod/"+pod.Name, 8080)
	var call struct {
		Status       int    `json:"status"`
		TLSHandshake bool   `json:"tlsHandshake"`
		Issuer       string `json:"peerCertificateIssuer"`
		Error        string `json:"error"`
	}

	// The chapters, each a subtest that reports on its own.
	t.Run("a pod of another cluster reaches the auth service's NodePort", func(t *testing.T) {
		// The auth CA is not trusted by the test pod; the handshake itself is
		// what is checked. kube-proxy programs a new NodePort within seconds,
		// so the call is retried until then.
		_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			if err := tryGetJSON("http://"+addr+"/call?insecure=1&url="+target, &call); err != nil {
				call.Error = err.Error()
				return false, nil
			}
			return call.TLSHandshake && call.Status == 200, nil
		})
		if !call.TLSHandshake || call.Status != 200 || call.Error != "" {
			t.Errorf("a pod in %s calling %s: %+v; want a TLS handshake and 200", consumer.Name, target, call)
		}
		if !strings.Contains(strings.ToLower(call.Issuer), "offload") {
			t.Errorf("the auth server's certificate is issued by %q, want the agent's own CA", call.Issuer)
		}
	})

	t.Run("the auth pod's own address answers on its side only", func(t *testing.T) {
		// The auth pod's own address answers on its cluster's side (the host
		// reaches pods as the API server does), but not from the other cluster.
		var httpsPort int32
		for _, p := range authPod.Spec.Containers[0].Ports {
			if p.Name == "https" {
				httpsPort = p.ContainerPort
			}
		}
		direct := fmt.Sprintf("https://%s:%d/healthz", authPod.Status.PodIP, httpsPort)
		insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // only the reachability is checked
		resp, err := insecure.Get(direct)
		if err != nil {
			t.Fatalf("the provider's auth pod does not answer at %s from its own side: %v", direct, err)
		}
		_ = resp.Body.Close()
		call.Error, call.TLSHandshake = "", false
		if err := tryGetJSON("http://"+addr+"/call?insecure=1&url="+direct, &call); err != nil {
			t.Fatal(err)
		}
		if call.TLSHandshake || call.Error == "" {
			t.Errorf("a pod in %s reached the provider's pod %s directly: %+v; the clusters are not isolated", consumer.Name, direct, call)
		}
	})
}
