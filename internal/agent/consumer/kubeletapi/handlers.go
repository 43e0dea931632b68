package kubeletapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream" //nolint:staticcheck // SA1019: client-go v0.37's portforward and SPDY dialers still return this package's Connection and UpgradeFailureError, which k8s.io/streaming's are not (distinct types, not aliases); move when client-go does
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/utils/exec"
	"k8s.io/utils/ptr"
)

// target returns the Target of a consumer pod: the one ServeHTTP resolved
// when ctx carries it (the port-forward handler gets a fresh context), or a
// new resolution.
func (s *Server) target(ctx context.Context, namespace, pod string) (Target, error) {
	if r, ok := ctx.Value(targetKey{}).(resolved); ok && r.namespace == namespace && r.pod == pod {
		return r.target, nil
	}
	t, err := s.opts.Resolver.Resolve(ctx, namespace, pod)
	if errors.Is(err, ErrUnknownPod) {
		return Target{}, errdefs.AsNotFound(err)
	}
	return t, err
}

// providerError makes err, returned by the provider's API server, an error
// the virtual-kubelet handlers map to the same HTTP status.
func providerError(err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return errdefs.AsNotFound(err)
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return errdefs.AsInvalidInput(err)
	}
	return err
}

// podLogOptions maps the options of a kubelet log request to the provider's
// pods/log options. A Tail of 0 means no limit: the virtual-kubelet parser
// does not tell an absent tailLines from tailLines=0.
func podLogOptions(container string, o api.ContainerLogOpts) *corev1.PodLogOptions {
	p := &corev1.PodLogOptions{
		Container:  container,
		Follow:     o.Follow,
		Previous:   o.Previous,
		Timestamps: o.Timestamps,
	}
	if o.Tail > 0 {
		p.TailLines = ptr.To(int64(o.Tail))
	}
	if o.LimitBytes > 0 {
		p.LimitBytes = ptr.To(int64(o.LimitBytes))
	}
	if o.SinceSeconds > 0 {
		p.SinceSeconds = ptr.To(int64(o.SinceSeconds))
	}
	if !o.SinceTime.IsZero() {
		p.SinceTime = ptr.To(metav1.NewTime(o.SinceTime))
	}
	return p
}

// containerLogs streams the logs of the remote pod's container.
func (s *Server) containerLogs(ctx context.Context, namespace, pod, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	t, err := s.target(ctx, namespace, pod)
	if err != nil {
		return nil, err
	}
	logs, err := t.Client.CoreV1().Pods(t.Namespace).GetLogs(t.Name, podLogOptions(container, opts)).Stream(ctx)
	if err != nil {
		return nil, providerError(fmt.Errorf("reading the logs of remote pod %s/%s: %w", t.Namespace, t.Name, err))
	}
	return logs, nil
}

// runInContainer runs cmd in the remote pod's container through the
// provider's pods/exec.
func (s *Server) runInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach api.AttachIO) error {
	t, err := s.target(ctx, namespace, pod)
	if err != nil {
		return err
	}
	u := t.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.Namespace).Name(t.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: cmd, TTY: attach.TTY(),
			Stdin: attach.Stdin() != nil, Stdout: attach.Stdout() != nil, Stderr: attach.Stderr() != nil,
		}, scheme.ParameterCodec).URL()
	return stream(ctx, t.Config, u, attach)
}

// attachToContainer attaches to the remote pod's container through the
// provider's pods/attach.
func (s *Server) attachToContainer(ctx context.Context, namespace, pod, container string, attach api.AttachIO) error {
	t, err := s.target(ctx, namespace, pod)
	if err != nil {
		return err
	}
	u := t.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.Namespace).Name(t.Name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{
			Container: container, TTY: attach.TTY(),
			Stdin: attach.Stdin() != nil, Stdout: attach.Stdout() != nil, Stderr: attach.Stderr() != nil,
		}, scheme.ParameterCodec).URL()
	return stream(ctx, t.Config, u, attach)
}

// shouldFallback reports whether a WebSocket upgrade failed in a way that
// SPDY may not, as kubectl decides.
func shouldFallback(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// stream connects attach to the provider's exec or attach URL u, over
// WebSockets or, for older API servers, SPDY, the way kubectl does.
func stream(ctx context.Context, cfg *rest.Config, u *url.URL, attach api.AttachIO) error {
	spdyExec, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return err
	}
	// WebSocket upgrades are GET requests (RFC 6455).
	wsExec, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewFallbackExecutor(wsExec, spdyExec, shouldFallback)
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Stdin: attach.Stdin(), Stdout: attach.Stdout(), Stderr: attach.Stderr(), Tty: attach.TTY()}
	if attach.TTY() && attach.Resize() != nil {
		opts.TerminalSizeQueue = sizeQueue{ctx: ctx, sizes: attach.Resize()}
	}
	err = exec.StreamWithContext(ctx, opts)
	// The virtual-kubelet handlers report the exit code of an unwrapped
	// ExitError to the client, as the kubelet does.
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr
	}
	if err != nil {
		return providerError(fmt.Errorf("streaming to the remote pod: %w", err))
	}
	return nil
}

// sizeQueue passes terminal resizes from the client to the provider.
type sizeQueue struct {
	ctx   context.Context
	sizes <-chan api.TermSize
}

// Next returns the next terminal size, or nil when there are no more.
func (q sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case s, ok := <-q.sizes:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
	case <-q.ctx.Done():
		return nil
	}
}

// portForward forwards one connection to port of the remote pod: it opens a
// port-forward connection to the provider (WebSocket-tunnelled SPDY, or SPDY)
// and copies stream both ways.
func (s *Server) portForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	t, err := s.target(ctx, namespace, pod)
	if err != nil {
		return err
	}
	u := t.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.Namespace).Name(t.Name).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(t.Config)
	if err != nil {
		return err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialer(u, t.Config)
	if err != nil {
		return err
	}
	conn, _, err := portforward.NewFallbackDialer(tunnel, dialer, shouldFallback).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return providerError(fmt.Errorf("connecting to port %d of remote pod %s/%s: %w", port, t.Namespace, t.Name, err))
	}
	defer func() { _ = conn.Close() }()
	return forward(conn, port, stream)
}

// forward copies local to and from port over conn, creating the error and
// data streams of one port-forward request as client-go's PortForwarder
// does.
func forward(conn httpstream.Connection, port int32, local io.ReadWriter) error {
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errorStream, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("creating the error stream of port %d: %w", port, err)
	}
	// Nothing is written to the error stream.
	_ = errorStream.Close()
	remoteErr := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errorStream)
		switch {
		case err != nil:
			remoteErr <- fmt.Errorf("reading the error stream of port %d: %w", port, err)
		case len(msg) > 0:
			remoteErr <- fmt.Errorf("forwarding port %d: %s", port, msg)
		default:
			remoteErr <- nil
		}
	}()

	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	dataStream, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("creating the data stream of port %d: %w", port, err)
	}
	localErr := make(chan error, 1)
	remoteDone := make(chan struct{})
	go func() {
		// Copy until the remote side closes; errors show when it resets.
		_, _ = io.Copy(local, dataStream)
		close(remoteDone)
	}()
	go func() {
		// Half-close once the local side is done, so the remote sees EOF.
		defer func() { _ = dataStream.Close() }()
		if _, err := io.Copy(dataStream, local); err != nil {
			localErr <- err
		}
	}()
	select {
	case <-remoteDone:
	case err := <-localErr:
		_ = dataStream.Reset()
		return fmt.Errorf("copying to port %d: %w", port, err)
	}
	return <-remoteErr
}
