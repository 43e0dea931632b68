package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// kubeletTokens says whether the direct run pays for its pods'
// service-account tokens as on real nodes: yes, unless
// OFFLOAD_BENCH_KUBELET_TOKENS=0. A kubelet requests a token for each pod
// with a service-account token volume (every pod, by default) before it
// starts the pod's containers; kwok's fake nodes request none. The
// offloaded run pays for them either way: the consumer's agent, the
// virtual node's kubelet, requests each offloaded pod's token from the
// consumer's API server, and the remote pod mounts it instead of one of
// the provider's. Without it, P1 charges the offloaded run alone for
// tokens that running the pods directly on real nodes costs too; with =0,
// P1 is comparable with the figures measured before this was the default.
func kubeletTokens() bool { return os.Getenv(kubeletTokensEnv) != "0" }

// kubeletTokensEnv turns the direct run's tokens off with 0.
const kubeletTokensEnv = "OFFLOAD_BENCH_KUBELET_TOKENS"

// kubeletTokenWorkers is how many tokens are requested at once: kubelets
// on many nodes request theirs in parallel.
const kubeletTokenWorkers = 16

// tokenMinter requests, as a kubelet does, the service-account tokens of
// each pod of a Deployment once it is bound to a node.
type tokenMinter struct {
	kube  kubernetes.Interface
	pods  chan *corev1.Pod
	stop  func()
	wg    sync.WaitGroup
	mu    sync.Mutex
	seen  map[types.UID]bool
	done  int
	errs  int
	first error
	last  time.Time
}

// startTokenMinter starts requesting the tokens of the pods of Deployment
// name in ns, of at most n pods, as they are bound.
func startTokenMinter(ctx context.Context, b *testing.B, kube kubernetes.Interface, ns, name string, n int) *tokenMinter {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	m := &tokenMinter{kube: kube, pods: make(chan *corev1.Pod, n), seen: map[types.UID]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=" + name }))
	inf := f.Core().V1().Pods().Informer()
	bound := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.seen[pod.UID] || len(m.seen) >= n {
			return
		}
		m.seen[pod.UID] = true
		m.pods <- pod
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    bound,
		UpdateFunc: func(_, obj any) { bound(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	for range kubeletTokenWorkers {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			for {
				select {
				case pod := <-m.pods:
					m.mint(ctx, pod)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatalf("watching pods in %s: the cache did not sync", ns)
	}
	m.stop = func() {
		cancel()
		f.Shutdown()
		m.wg.Wait()
	}
	return m
}

// mint requests the tokens of pod's projected service-account token
// sources, as the kubelet's token manager does: for the pod's service
// account, with the source's audience and expiry, bound to the pod.
func (m *tokenMinter) mint(ctx context.Context, pod *corev1.Pod) {
	var err error
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			t := src.ServiceAccountToken
			if t == nil || err != nil {
				continue
			}
			spec := authenticationv1.TokenRequestSpec{
				ExpirationSeconds: t.ExpirationSeconds,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			}
			if t.Audience != "" {
				spec.Audiences = []string{t.Audience}
			}
			_, err = m.kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName,
				&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done++
	m.last = time.Now()
	if err != nil {
		m.errs++
		if m.first == nil {
			m.first = err
		}
	}
}

// wait waits until the tokens of n pods were requested, stops the minter
// and returns when the last was.
func (m *tokenMinter) wait(ctx context.Context, b *testing.B, n int, timeout time.Duration) time.Time {
	b.Helper()
	defer m.stop()
	var last time.Time
	_, err := framework.Poll(ctx, 50*time.Millisecond, timeout, func(context.Context) (bool, string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.errs > 0 {
			b.Fatalf("requesting the tokens of the direct run's pods as kubelets do: %d failed, the first with: %v", m.errs, m.first)
		}
		last = m.last
		return m.done >= n, fmt.Sprintf("the tokens of %d of %d pods requested", m.done, n)
	})
	if err != nil {
		b.Fatal(err)
	}
	return last
}
