package localapi

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"
)

// unixCreds are the unix socket's transport credentials: no encryption;
// the peer's uid (SO_PEERCRED) is what authorize checks.
type unixCreds struct{}

type unixAuth struct {
	credentials.CommonAuthInfo
	uid uint32
}

func (unixAuth) AuthType() string { return "unix" }

func (unixCreds) ClientHandshake(_ context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, unixAuth{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (unixCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, nil, errors.New("localapi: not a unix connection")
	}
	uid, err := peerUID(uc)
	if err != nil {
		return nil, nil, err
	}
	return c, unixAuth{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}, uid: uid}, nil
}

func (unixCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "unix"}
}

func (unixCreds) Clone() credentials.TransportCredentials { return unixCreds{} }

func (unixCreds) OverrideServerName(string) error { return nil }

func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return cred.Uid, nil
}

// allowCreds are mutual TLS whose server handshake also says whether the
// client's certificate names a client that may call.
type allowCreds struct {
	credentials.TransportCredentials
	allow []string
}

type allowedAuth struct {
	credentials.TLSInfo
	name string
	ok   bool
}

func (a allowCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := a.TransportCredentials.ServerHandshake(c)
	if err != nil {
		return nil, nil, err
	}
	info, ok := ai.(credentials.TLSInfo)
	if !ok {
		return nil, nil, errors.New("localapi: not a TLS connection")
	}
	name := peerName(info.State)
	return conn, allowedAuth{TLSInfo: info, name: name, ok: slices.Contains(a.allow, name)}, nil
}

func (a allowCreds) Clone() credentials.TransportCredentials {
	return allowCreds{TransportCredentials: a.TransportCredentials.Clone(), allow: slices.Clone(a.allow)}
}

func peerName(s tls.ConnectionState) string {
	if len(s.PeerCertificates) == 0 {
		return ""
	}
	return s.PeerCertificates[0].Subject.CommonName
}
