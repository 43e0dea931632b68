package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// apiCalls is how many calls of each kind BenchmarkAPICalls makes.
const apiCalls = 2000

// BenchmarkAPICalls measures what the API server and etcd spend, in CPU,
// on each kind of call that an offloaded pod costs the consumer beyond
// what it costs when run directly (BenchmarkOffload's request counts): the
// pod read whole before its remote creation, and its service-account token,
// next to a pod's creation for scale (with the status patch of kwok, which
// runs it: a call that changes a pod costs what its watchers do after it).
// One cluster with one kwok node; apiCalls calls of each kind, 8 at a time,
// in protobuf as the agent makes them.
func BenchmarkAPICalls(b *testing.B) {
	ctx := context.Background()
	c := localcluster.StartClusters(b, localcluster.ClusterOptions{Name: "apicalls", FakeNodes: 1, DisableQPSLimits: true})[0]
	fmt.Printf("BenchmarkAPICalls: one cluster sharing the machine's %d CPUs with this benchmark's client; CPU of the API server and etcd processes per call\n", runtime.NumCPU())
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = apiruntime.ContentTypeProtobuf
	cfg.AcceptContentTypes = apiruntime.ContentTypeProtobuf + "," + apiruntime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	pids := c.PIDs()
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		b.Fatalf("listing the fake node: %v (%d nodes)", err, len(nodes.Items))
	}
	// The token controller makes the default service account a moment
	// after the namespace.
	framework.Eventually(b, time.Minute, "the default service account", func(ctx context.Context) bool {
		_, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	for i := 0; i < b.N; i++ {
		pods := make([]*corev1.Pod, apiCalls)
		prefix := fmt.Sprintf("p%d-", i)
		measureCalls(b, pids, "post-pod", "POST pods, kwok making them Running", func(j int) error {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d", prefix, j), Labels: map[string]string{"app": "apicalls"}},
				Spec: corev1.PodSpec{NodeName: nodes.Items[0].Name, Containers: []corev1.Container{{Name: "c", Image: benchImage}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
			got, err := kube.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{})
			pods[j] = got
			return err
		})
		// As podcontroller reads a pod whole: at the informer's version,
		// from the API server's watch cache.
		measureCalls(b, pids, "get-pod", "GET pods at a resourceVersion", func(j int) error {
			_, err := kube.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pods[j].Name, metav1.GetOptions{ResourceVersion: pods[j].ResourceVersion})
			return err
		})
		// As the agent (and a kubelet) requests a pod's token: bound to it.
		measureCalls(b, pids, "token", "POST serviceaccounts/token", func(j int) error {
			_, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).CreateToken(ctx, "default", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: ptr.To(int64(3600)),
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pods[j].Name, UID: pods[j].UID},
			}}, metav1.CreateOptions{})
			return err
		})
		err := kube.CoreV1().Pods(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{LabelSelector: "app=apicalls"})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// measureCalls makes apiCalls calls of call, 8 at a time, and reports the
// CPU the API server and etcd of pids used per call, as metrics named
// after unit.
func measureCalls(b *testing.B, pids map[string]int, unit, name string, call func(j int) error) {
	b.Helper()
	cpu := func() (apiserver, etcd float64) {
		a, err := machine.CPUSeconds(pids["kube-apiserver"])
		if err != nil {
			b.Fatal(err)
		}
		e, err := machine.CPUSeconds(pids["etcd"])
		if err != nil {
			b.Fatal(err)
		}
		return a, e
	}
	a0, e0 := cpu()
	start := time.Now()
	const workers = 8
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w; j < apiCalls; j += workers {
				if err := call(j); err != nil {
					errs <- fmt.Errorf("%s, call %d: %w", name, j, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	a1, e1 := cpu()
	apiserver, etcd := (a1-a0)*1000/apiCalls, (e1-e0)*1000/apiCalls
	fmt.Printf("%-36s %d calls in %5.2f s: API server %.2f ms of CPU per call, etcd %.2f\n", name, apiCalls, time.Since(start).Seconds(), apiserver, etcd)
	b.ReportMetric(apiserver, "ms-apiserver-cpu/"+unit)
	b.ReportMetric(etcd, "ms-etcd-cpu/"+unit)
}
