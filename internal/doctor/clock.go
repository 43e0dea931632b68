package doctor

import (
	"context"
	"time"

	"github.com/kubectl-offload/kubectl-offload/internal/status"
)

// How far a peer's clock may be from this cluster's: past skewWarning the
// doctor warns, past skewFailure it fails. Credentials expire and rotate
// on time, so a large skew makes a peer's credentials look expired or not
// yet valid.
const (
	skewWarning = 30 * time.Second
	skewFailure = 5 * time.Minute
)

// enableNTP is the fix for clocks that drift apart.
const enableNTP = "enable NTP (chrony or systemd-timesyncd) on the nodes of both clusters"

// clockSkewChecker compares each peer's clock, read from the Date header
// of its auth service, with this cluster's API server's.
type clockSkewChecker struct{}

func (clockSkewChecker) Name() string { return "clockSkew" }

func (clockSkewChecker) Check(ctx context.Context, d *Env) status.Section {
	s := status.Section{Title: "Clock skew"}
	fcs, err := d.ForeignClusters(ctx)
	switch {
	case status.MissingCRD(err):
		s.Checks = append(s.Checks, status.Warn("peers", "the ForeignCluster CRD is missing, so the peers are unknown: run kubectl offload upgrade to reapply the CRDs"))
		return s
	case err != nil:
		s.Checks = append(s.Checks, status.Warn("peers", "%v", err))
		return s
	case len(fcs) == 0:
		s.Checks = append(s.Checks, status.OK("peers", "this cluster has no peers: there is no clock to compare"))
		return s
	}
	if d.Config == nil {
		s.Checks = append(s.Checks, status.Warn("apiServer", "no client configuration: the clock skew with the peers is not checked"))
		return s
	}
	local, err := apiServerClockOffset(ctx, d.Config, d.ProbeTimeout)
	if err != nil {
		s.Checks = append(s.Checks, status.Warn("apiServer", "cannot read the clock of this cluster's API server: %v; the skew with the peers is not checked", err))
		return s
	}
	for _, fc := range fcs {
		name := "peer/" + fc.Name
		if fc.Spec.AuthURL == "" {
			s.Checks = append(s.Checks, status.OK(name, "peer %s has no auth URL here (it only consumes this cluster): run kubectl offload doctor on %s to compare the clocks", fc.Name, fc.Name))
			continue
		}
		off, err := peerClockOffset(ctx, fc.Spec.AuthURL, fc.Spec.CACertHash, d.ProbeTimeout)
		if err != nil {
			s.Checks = append(s.Checks, status.Warn(name, "cannot read the clock of peer %s at %s from here: %v; the skew is not checked", fc.Name, fc.Spec.AuthURL, err))
			continue
		}
		s.Checks = append(s.Checks, skewCheck(name, fc.Name, off-local))
	}
	return s
}

// skewCheck judges skew, how far the clock of peer is ahead of this
// cluster's (negative: behind).
func skewCheck(name, peer string, skew time.Duration) status.Check {
	abs := skew.Abs()
	dir := "ahead of"
	if skew < 0 {
		dir = "behind"
	}
	r := abs.Round(time.Second)
	switch {
	case abs > skewFailure:
		return status.Fail(name, "the clock of peer %s is %s %s this cluster's: the credentials the clusters exchange look expired or not yet valid, so peering breaks; %s", peer, r, dir, enableNTP)
	case abs > skewWarning:
		return status.Warn(name, "the clock of peer %s is %s %s this cluster's: credentials may be refused around their rotation; %s", peer, r, dir, enableNTP)
	}
	return status.OK(name, "the clock of peer %s is within %s of this cluster's", peer, skewWarning)
}
