package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"sigs.k8s.io/yaml"
)

// Config configures the speaker. The zero ListenPort means 179; a negative
// one means the speaker only dials out.
type Config struct {
	ASN        uint32 `json:"asn"`
	RouterID   string `json:"routerID"`
	ListenPort int32  `json:"listenPort,omitempty"`
	// ListenAddresses default to all addresses.
	ListenAddresses []string `json:"listenAddresses,omitempty"`
	Peers           []Peer   `json:"peers,omitempty"`
	// Networks override the route target and distinguisher of a VNI.
	Networks []NetworkConfig `json:"networks,omitempty"`
	// RDFromVTEP derives the default RD of a route from its node's VTEP
	// (VTEP:VNI) instead of the router ID. Replicas with different router
	// IDs then originate identical routes, so a replica loss withdraws
	// nothing from a peer that hears several of them.
	RDFromVTEP bool `json:"rdFromVTEP,omitempty"`
	// ImportHoldTime is how long routes learned from a peer whose session
	// just changed state are kept (so a flapping peer does not disturb
	// plans). Default 10s.
	ImportHoldTime Duration `json:"importHoldTime,omitempty"`
}

// Peer is one BGP neighbour.
type Peer struct {
	Address  string `json:"address"`
	ASN      uint32 `json:"asn"`
	Password string `json:"password,omitempty"`
	// Multihop is the eBGP multihop TTL; 0 means directly connected.
	Multihop             uint32 `json:"multihop,omitempty"`
	RouteReflectorClient bool   `json:"routeReflectorClient,omitempty"`
	// Port is the peer's BGP port; 0 means 179.
	Port uint32 `json:"port,omitempty"`
	// Passive waits for the peer to connect.
	Passive bool `json:"passive,omitempty"`
	// LocalAddress is the source address of the session (update-source).
	LocalAddress string `json:"localAddress,omitempty"`
}

// NetworkConfig sets the route target (ASN:NN) and route distinguisher
// (IP:NN or ASN:NN) used for a VNI.
type NetworkConfig struct {
	VNI         uint32 `json:"vni"`
	RouteTarget string `json:"routeTarget,omitempty"`
	RD          string `json:"rd,omitempty"`
}

// Duration is a time.Duration written as "10s" in files.
type Duration struct{ time.Duration }

// UnmarshalJSON accepts "10s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		d.Duration = time.Duration(n * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as "10s".
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(d.String())), nil }

// LoadFile reads a YAML or JSON configuration file.
func LoadFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("bgp config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("bgp config %s: %w", path, err)
	}
	return c, nil
}

// ParsePeer parses a peer given as ADDR,ASN.
func ParsePeer(s string) (Peer, error) {
	addr, asn, ok := strings.Cut(s, ",")
	if !ok {
		return Peer{}, fmt.Errorf("bgp-peer %q: want ADDR,ASN", s)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(asn), 10, 32)
	if err != nil {
		return Peer{}, fmt.Errorf("bgp-peer %q: asn: %w", s, err)
	}
	return Peer{Address: strings.TrimSpace(addr), ASN: uint32(n)}, nil
}

// Validate checks the configuration and names the first bad field.
func (c *Config) Validate() error {
	var errs []error
	if c.ASN == 0 || c.ASN == 65535 || c.ASN == 23456 || c.ASN == 4294967295 {
		errs = append(errs, fmt.Errorf("asn: %d is not a usable AS number", c.ASN))
	}
	rid, err := netip.ParseAddr(c.RouterID)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("routerID: %q is not an IPv4 address", c.RouterID))
	case !rid.Is4() || rid.IsUnspecified() || rid.IsMulticast():
		errs = append(errs, fmt.Errorf("routerID: %s must be a unicast IPv4 address", c.RouterID))
	}
	if c.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("listenPort: %d is not a TCP port", c.ListenPort))
	}
	for i, a := range c.ListenAddresses {
		if _, err := netip.ParseAddr(a); err != nil {
			errs = append(errs, fmt.Errorf("listenAddresses[%d]: %q is not an IP address", i, a))
		}
	}
	seen := map[netip.Addr]int{}
	for i, p := range c.Peers {
		a, err := netip.ParseAddr(p.Address)
		if err != nil || a.IsUnspecified() || a.IsMulticast() {
			errs = append(errs, fmt.Errorf("peers[%d].address: %q is not a unicast IP address", i, p.Address))
			continue
		}
		if j, dup := seen[a]; dup {
			errs = append(errs, fmt.Errorf("peers[%d].address: %s duplicates peers[%d]", i, a, j))
		}
		seen[a] = i
		if p.ASN == 0 || p.ASN == 65535 || p.ASN == 23456 || p.ASN == 4294967295 {
			errs = append(errs, fmt.Errorf("peers[%d].asn: %d is not a usable AS number", i, p.ASN))
		}
		if p.Multihop > 255 {
			errs = append(errs, fmt.Errorf("peers[%d].multihop: %d is more than 255", i, p.Multihop))
		}
		if p.LocalAddress != "" {
			if _, err := netip.ParseAddr(p.LocalAddress); err != nil {
				errs = append(errs, fmt.Errorf("peers[%d].localAddress: %q is not an IP address", i, p.LocalAddress))
			}
		}
		if p.Port > 65535 {
			errs = append(errs, fmt.Errorf("peers[%d].port: %d is not a TCP port", i, p.Port))
		}
		if p.RouteReflectorClient && p.ASN != c.ASN {
			errs = append(errs, fmt.Errorf("peers[%d].routeReflectorClient: only an iBGP peer (asn %d) can be a client, got asn %d", i, c.ASN, p.ASN))
		}
		if len(p.Password) > 80 {
			errs = append(errs, fmt.Errorf("peers[%d].password: longer than 80 characters", i))
		}
	}
	vnis := map[uint32]int{}
	for i, n := range c.Networks {
		if n.VNI == 0 || n.VNI > 16777215 {
			errs = append(errs, fmt.Errorf("networks[%d].vni: must be 1..16777215, got %d", i, n.VNI))
		}
		if j, dup := vnis[n.VNI]; dup {
			errs = append(errs, fmt.Errorf("networks[%d].vni: %d duplicates networks[%d]", i, n.VNI, j))
		}
		vnis[n.VNI] = i
		if n.RouteTarget != "" {
			if _, err := bgp.ParseRouteTarget(n.RouteTarget); err != nil {
				errs = append(errs, fmt.Errorf("networks[%d].routeTarget: %q: %w", i, n.RouteTarget, err))
			}
		}
		if n.RD != "" {
			if _, err := bgp.ParseRouteDistinguisher(n.RD); err != nil {
				errs = append(errs, fmt.Errorf("networks[%d].rd: %q: %w", i, n.RD, err))
			}
		}
	}
	if c.ImportHoldTime.Duration < 0 {
		errs = append(errs, fmt.Errorf("importHoldTime: must not be negative, got %s", c.ImportHoldTime))
	}
	return errors.Join(errs...)
}

// routeTarget returns the route target of vni: configured, or ASN:VNI.
func (c *Config) routeTarget(vni uint32) (bgp.ExtendedCommunityInterface, string) {
	for _, n := range c.Networks {
		if n.VNI == vni && n.RouteTarget != "" {
			rt, err := bgp.ParseRouteTarget(n.RouteTarget)
			if err == nil {
				return rt, n.RouteTarget
			}
		}
	}
	if c.ASN <= 65535 {
		return bgp.NewTwoOctetAsSpecificExtended(bgp.EC_SUBTYPE_ROUTE_TARGET, uint16(c.ASN), vni, true), fmt.Sprintf("%d:%d", c.ASN, vni)
	}
	// A four-byte ASN leaves 16 bits for the VNI.
	return bgp.NewFourOctetAsSpecificExtended(bgp.EC_SUBTYPE_ROUTE_TARGET, c.ASN, uint16(vni), true), fmt.Sprintf("%d:%d", c.ASN, uint16(vni))
}

// rd returns the route distinguisher of vni for a route with next hop
// vtep: configured, or routerID:VNI (VTEP:VNI with RDFromVTEP) (type 1),
// or ASN:VNI (type 0) when the VNI does not fit the 16 bits of a type-1
// RD.
func (c *Config) rd(vni uint32, vtep netip.Addr) bgp.RouteDistinguisherInterface {
	for _, n := range c.Networks {
		if n.VNI == vni && n.RD != "" {
			if rd, err := bgp.ParseRouteDistinguisher(n.RD); err == nil {
				return rd
			}
		}
	}
	if vni <= 65535 {
		rid, _ := netip.ParseAddr(c.RouterID)
		if c.RDFromVTEP && vtep.Is4() {
			rid = vtep
		}
		if rd, err := bgp.NewRouteDistinguisherIPAddressAS(rid, uint16(vni)); err == nil {
			return rd
		}
	}
	return bgp.NewRouteDistinguisherTwoOctetAS(uint16(c.ASN), vni)
}
