package bgp

import (
	"fmt"

	"github.com/spf13/pflag"
)

// Flags are the speaker's command-line flags; --bgp-config supplies the
// rest, and a flag given on the command line overrides the file.
//
//	var bf bgp.Flags
//	bf.Add(cmd.Flags())
//	cfg, err := bf.Config(cmd.Flags()) // nil: BGP off
type Flags struct {
	asn      uint32
	routerID string
	port     int32
	peers    []string
	file     string
}

// Add registers the flags on f.
func (b *Flags) Add(f *pflag.FlagSet) {
	f.Uint32Var(&b.asn, "bgp-asn", 0, "local AS number; enables the BGP EVPN speaker")
	f.StringVar(&b.routerID, "bgp-router-id", "", "BGP router ID (IPv4)")
	f.Int32Var(&b.port, "bgp-listen-port", 0, "BGP listen port (default 179; -1: do not listen)")
	f.StringArrayVar(&b.peers, "bgp-peer", nil, "BGP peer as ADDR,ASN (repeatable)")
	f.StringVar(&b.file, "bgp-config", "", "BGP configuration file (YAML or JSON): asn, routerID, listenPort, peers (address, asn, password, multihop, routeReflectorClient, port, passive), networks (vni, routeTarget, rd), importHoldTime")
}

// Config returns the BGP configuration the flags of f (parsed) and the
// file say, or nil when BGP is off (no --bgp-asn and no asn in
// --bgp-config). It is validated.
func (b *Flags) Config(f *pflag.FlagSet) (*Config, error) {
	var c Config
	if b.file != "" {
		var err error
		if c, err = LoadFile(b.file); err != nil {
			return nil, err
		}
	}
	if f.Changed("bgp-asn") {
		c.ASN = b.asn
	}
	if f.Changed("bgp-router-id") {
		c.RouterID = b.routerID
	}
	if f.Changed("bgp-listen-port") {
		c.ListenPort = b.port
	}
	for _, s := range b.peers {
		p, err := ParsePeer(s)
		if err != nil {
			return nil, err
		}
		c.Peers = append(c.Peers, p)
	}
	if !f.Changed("bgp-asn") && b.file == "" {
		if f.Changed("bgp-router-id") || f.Changed("bgp-listen-port") || len(b.peers) > 0 {
			return nil, fmt.Errorf("bgp-asn: required with the other --bgp-* flags")
		}
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("bgp: %w", err)
	}
	return &c, nil
}
