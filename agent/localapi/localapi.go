// Package localapi is the agent's local API: what the CNI plugin and VM
// managers call, over a unix socket that only root may use, to create and
// delete endpoints on this node. HTTP with JSON bodies:
//
//	POST   /v1/endpoints          CreateRequest -> CreateResponse
//	DELETE /v1/endpoints/NAME     idempotent
//	GET    /v1/endpoints          []Endpoint (this node's endpoints)
//	GET    /v1/status             Status
//
// Errors come back as {"error": "...", "code": "..."} with an HTTP status.
//
//	c := localapi.NewClient("/run/skiff/agent.sock")
//	r, err := c.Create(ctx, localapi.CreateRequest{Name: "pod-a", Network: "blue", NetNS: "/var/run/netns/x", IfName: "eth0"})
package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// DefaultSocket is the agent's socket unless --socket says otherwise.
const DefaultSocket = "/run/skiff/agent.sock"

// CreateRequest asks for an endpoint plumbed into a namespace.
type CreateRequest struct {
	Name      string            `json:"name"`
	Network   string            `json:"network"`
	NetNS     string            `json:"netns"`  // path of the namespace
	IfName    string            `json:"ifName"` // interface name inside it
	MTU       int               `json:"mtu,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Owner     string            `json:"owner,omitempty"`
	Namespace string            `json:"namespace,omitempty"`
	// PF and VF: the veth stands in for VF VF of PF PF (an offload node
	// whose NIC has no VF netdevs, such as netdevsim): the endpoint is
	// registered as kind vf and its rules go on that VF's representor.
	PF string `json:"pf,omitempty"`
	VF *int   `json:"vf,omitempty"`
}

// CreateResponse describes the plumbed endpoint.
type CreateResponse struct {
	Name     string   `json:"name"`
	Network  string   `json:"network"`
	HostIf   string   `json:"hostIf"`
	IfName   string   `json:"ifName"`
	MAC      string   `json:"mac"`
	MTU      int      `json:"mtu"`
	IPs      []string `json:"ips"`      // CIDR form
	Gateways []string `json:"gateways"` // one per address, "" when none
	Revision int64    `json:"revision"`
}

// Endpoint is one of this node's endpoints as the list call shows it.
type Endpoint struct {
	Name    string            `json:"name"`
	Network string            `json:"network"`
	Owner   string            `json:"owner,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	HostIf  string            `json:"hostIf"`
}

// Status tells whether the agent can serve.
type Status struct {
	Ready     bool   `json:"ready"`
	Connected bool   `json:"connected"`
	Revision  int64  `json:"revision"`
	Reason    string `json:"reason,omitempty"`
}

// Error is an error returned by the API. Code is one of invalid,
// not-found, exists, exhausted, unavailable, failed.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"error"`
}

func (e *Error) Error() string { return e.Message }

// Client calls an agent's local API.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the agent listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{socket: socket, http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// Create asks the agent for an endpoint.
func (c *Client) Create(ctx context.Context, r CreateRequest) (*CreateResponse, error) {
	var out CreateResponse
	if err := c.do(ctx, http.MethodPost, "/v1/endpoints", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete removes an endpoint and its interface. Deleting what does not
// exist succeeds.
func (c *Client) Delete(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/endpoints/"+url.PathEscape(name), nil, nil)
}

// List returns this node's endpoints.
func (c *Client) List(ctx context.Context) ([]Endpoint, error) {
	var out []Endpoint
	if err := c.do(ctx, http.MethodGet, "/v1/endpoints", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Status returns the agent's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	if err := c.do(ctx, http.MethodGet, "/v1/status", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &Error{Code: "unavailable", Message: fmt.Sprintf("skiff-agent is not reachable at %s: %v", c.socket, unwrapNet(err))}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		var e Error
		if json.Unmarshal(b, &e) != nil || e.Message == "" {
			e = Error{Code: "failed", Message: fmt.Sprintf("agent answered %s", resp.Status)}
		}
		return &e
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("localapi: decode answer: %w", err)
		}
	}
	return nil
}

func unwrapNet(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
