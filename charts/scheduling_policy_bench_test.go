package charts_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/webhook"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// BenchmarkTheSchedulingPolicy reports what the scheduling policies cost
// the API server for each pod created in an offloaded namespace, which
// every offloaded pod pays on the consumer: the API server's CPU time per
// pod created (a dry run: admission and defaults, no storage) in a
// namespace offloaded with strategy Remote, the same in a plain namespace,
// and the difference. The API server is the test's own process; nothing
// else uses it meanwhile, but the figures are only as steady as the
// machine is quiet.
//
//	go test ./charts -run '^$' -bench TheSchedulingPolicy -benchtime 1x
//
// With OFFLOAD_BENCH_PROFILE naming a directory, it writes there a CPU
// profile of the API server over the first seconds of the measured round
// of the offloaded namespace, scheduling-policy-kube-apiserver.pprof.
func BenchmarkTheSchedulingPolicy(b *testing.B) {
	kube, c := schedulingPolicies(b, nil)
	plain := newNamespace(b, kube, nil)
	no := &offloadv1alpha1.NamespaceOffloading{Spec: offloadv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: offloadv1alpha1.Remote}}
	offloaded := offloadedNamespace(b, kube, c, no, plain, webhook.Options{})
	pid := apiServerPID(b)
	const pods = 2000
	for b.Loop() {
		// The first round warms both paths up; the second is measured.
		var perPod [2]float64
		for round := range 2 {
			for i, ns := range []string{plain, offloaded} {
				profiled := func() {}
				if round == 1 && i == 1 {
					profiled = profileAPIServer(b, kube)
				}
				perPod[i] = apiServerCPUPerPod(b, kube, pid, ns, pods)
				profiled()
			}
		}
		b.ReportMetric(perPod[0], "ms-cpu-per-pod-plain")
		b.ReportMetric(perPod[1], "ms-cpu-per-pod-offloaded")
		b.ReportMetric(perPod[1]-perPod[0], "ms-cpu-per-pod-policy")
	}
}

// apiServerCPUPerPod creates n pods in ns, four at a time, with a dry run,
// and returns the milliseconds of CPU time the API server process pid used
// per pod meanwhile.
func apiServerCPUPerPod(b *testing.B, kube kubernetes.Interface, pid int, ns string, n int) float64 {
	b.Helper()
	before := processCPUSeconds(b, pid)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				pod := newPod(ns, fmt.Sprintf("pod-%d", i), nil)
				if _, err := kube.CoreV1().Pods(ns).Create(b.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return (processCPUSeconds(b, pid) - before) * 1000 / float64(n)
}

// apiServerPID is the process ID of the kube-apiserver this test process
// started (envtest.APIServer): its child of that name.
func apiServerPID(b *testing.B) int {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		// ProcStat's fields start at the state: the parent is the second.
		if st, err := machine.ProcStat(pid); err == nil && strings.TrimSpace(string(comm)) == "kube-apiserver" && int(st[1]) == os.Getpid() {
			return pid
		}
	}
	b.Fatal("no kube-apiserver process started by this test process")
	return 0
}

// processCPUSeconds is the CPU time process pid has used.
func processCPUSeconds(b *testing.B, pid int) float64 {
	b.Helper()
	s, err := machine.CPUSeconds(pid)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// profileAPIServer, when OFFLOAD_BENCH_PROFILE names a directory, starts a
// CPU profile of the API server for profileSeconds, shorter than a round;
// wait waits until it is written there.
func profileAPIServer(b *testing.B, kube kubernetes.Interface) (wait func()) {
	dir := os.Getenv("OFFLOAD_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(profileSeconds)).DoRaw(b.Context())
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "scheduling-policy-kube-apiserver.pprof"), raw, 0o644)
		}
		if err != nil {
			b.Errorf("profiling the API server: %v", err)
		}
	}()
	return func() { <-done }
}

// profileSeconds is how long the profile of a round runs: less than the
// round, so that it sees nothing else.
const profileSeconds = 3
