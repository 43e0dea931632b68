package kubeletapi

import (
	"net"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/pki"
)

func TestParsePath(t *testing.T) {
	tests := []struct {
		name, path string
		want       request
		ok         bool
	}{
		{name: "container logs name a pod", path: "/containerLogs/shop/web/app", want: request{namespace: "shop", pod: "web"}, ok: true},
		{name: "exec names a pod", path: "/exec/shop/web/app", want: request{namespace: "shop", pod: "web"}, ok: true},
		{name: "attach names a pod", path: "/attach/shop/web/app", want: request{namespace: "shop", pod: "web"}, ok: true},
		{name: "port-forward names a pod without a container", path: "/portForward/shop/web", want: request{namespace: "shop", pod: "web"}, ok: true},
		{name: "run names a pod", path: "/run/shop/web/app", want: request{namespace: "shop", pod: "web"}, ok: true},
		{name: "run names a pod with its UID", path: "/run/shop/web/0000-1111/app", want: request{namespace: "shop", pod: "web"}, ok: true},
		{name: "logs without a container are not served", path: "/containerLogs/shop/web"},
		{name: "port-forward with a container is not served", path: "/portForward/shop/web/app"},
		{name: "an empty segment is not served", path: "/exec/shop//app"},
		{name: "a trailing slash is not served", path: "/exec/shop/web/app/"},
		{name: "pods are not served", path: "/pods"},
		{name: "the summary is the node's stats", path: "/stats/summary", want: request{nodeSubresource: "stats"}, ok: true},
		{name: "the resource metrics are the node's metrics", path: "/metrics/resource", want: request{nodeSubresource: "metrics"}, ok: true},
		{name: "other stats are not served", path: "/stats/summary/"},
		{name: "other metrics are not served", path: "/metrics"},
		{name: "the root is not served", path: "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parsePath(tt.path)
			if ok != tt.ok || got != tt.want {
				t.Errorf("parsePath(%q) = %v, %t; want %v, %t", tt.path, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestVerbFor(t *testing.T) {
	tests := map[string]string{
		http.MethodGet: "get", http.MethodHead: "get", http.MethodPost: "create", http.MethodPut: "update",
		http.MethodPatch: "patch", http.MethodDelete: "delete", http.MethodOptions: "", http.MethodConnect: "",
	}
	for method, want := range tests {
		if got := verbFor(method); got != want {
			t.Errorf("verbFor(%s) = %q, want %q", method, got, want)
		}
	}
}

func TestPodLogOptions(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		opts api.ContainerLogOpts
		want corev1.PodLogOptions
	}{
		{name: "no options ask for everything", want: corev1.PodLogOptions{Container: "app"}},
		{
			name: "every option is passed on",
			opts: api.ContainerLogOpts{Tail: 10, LimitBytes: 2048, Timestamps: true, Follow: true, Previous: true, SinceSeconds: 60},
			want: corev1.PodLogOptions{
				Container: "app", TailLines: ptr.To[int64](10), LimitBytes: ptr.To[int64](2048),
				Timestamps: true, Follow: true, Previous: true, SinceSeconds: ptr.To[int64](60),
			},
		},
		{
			name: "a since time is passed on",
			opts: api.ContainerLogOpts{SinceTime: since},
			want: corev1.PodLogOptions{Container: "app", SinceTime: ptr.To(metav1.NewTime(since))},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podLogOptions("app", tt.opts); !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestServingCertificateNamesTheNodesForAYear(t *testing.T) {
	now := time.Now()
	cert, err := servingCertificate([]net.IP{net.ParseIP("10.0.0.1")}, []string{"node.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if err := leaf.VerifyHostname("10.0.0.1"); err != nil {
		t.Error(err)
	}
	if err := leaf.VerifyHostname("node.example"); err != nil {
		t.Error(err)
	}
	if d := leaf.NotAfter.Sub(now); d < pki.ServingCertValidity-time.Second || d > pki.ServingCertValidity {
		t.Errorf("not after %s, want a year from now", leaf.NotAfter)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	if _, err := New(Options{Addr: ":0"}); err == nil {
		t.Error("New without a resolver and a client succeeded")
	}
}
