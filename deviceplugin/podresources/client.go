// Package podresources asks the kubelet's pod resources API (v1) which
// devices it allocated to a pod: how the CNI finds the VF of a pod when no
// meta-plugin gives it a deviceID.
//
//	c, err := podresources.Dial(podresources.DefaultSocket)
//	defer c.Close()
//	ids, err := c.DeviceIDs(ctx, "default", "web-0", "skiff.io/vf")  // ["0000:03:00.5"]
package podresources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is the kubelet's pod resources socket.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Errors DeviceIDs wraps.
var (
	// ErrPodNotFound: the kubelet knows no such pod.
	ErrPodNotFound = errors.New("pod not known to the kubelet")
	// ErrNoDevices: the pod holds no device of the resource.
	ErrNoDevices = errors.New("pod holds no device of the resource")
)

// Client talks to one kubelet. Safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	api  api.PodResourcesListerClient
	// Timeout bounds each question (10 s).
	Timeout time.Duration
}

// Dial returns a client of the pod resources API at socket (a unix socket
// path). No connection is made until the first question.
func Dial(socket string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("podresources: %s: %w", socket, err)
	}
	return &Client{conn: conn, api: api.NewPodResourcesListerClient(conn), Timeout: 10 * time.Second}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// DeviceIDs returns the IDs of the devices of resource the kubelet
// allocated to the pod namespace/name, over all its containers, in the
// kubelet's order (containers as the pod lists them), each once. It asks
// with Get (GA in Kubernetes 1.36) and, when that fails (an older
// kubelet with the Get gate off answers with an error), looks the pod up
// in List. Errors wrap ErrPodNotFound or ErrNoDevices when those are
// the answer.
func (c *Client) DeviceIDs(ctx context.Context, namespace, name, resource string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var pod *api.PodResources
	got, getErr := c.api.Get(ctx, &api.GetPodResourcesRequest{PodNamespace: namespace, PodName: name})
	if getErr == nil {
		pod = got.GetPodResources()
	} else {
		all, err := c.api.List(ctx, &api.ListPodResourcesRequest{})
		if err != nil {
			return nil, fmt.Errorf("podresources: pod %s/%s: Get: %v; List: %w", namespace, name, getErr, err)
		}
		for _, p := range all.GetPodResources() {
			if p.GetNamespace() == namespace && p.GetName() == name {
				pod = p
				break
			}
		}
		if pod == nil {
			return nil, fmt.Errorf("podresources: pod %s/%s: %w (Get: %v; not in List)", namespace, name, ErrPodNotFound, getErr)
		}
	}
	var ids []string
	for _, ctr := range pod.GetContainers() {
		for _, d := range ctr.GetDevices() {
			if d.GetResourceName() != resource {
				continue
			}
			for _, id := range d.GetDeviceIds() {
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("podresources: pod %s/%s: %w %s", namespace, name, ErrNoDevices, resource)
	}
	return ids, nil
}
