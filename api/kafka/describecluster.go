package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clusterID is what Metadata and DescribeCluster name the cluster.
const clusterID = "strata"

// describeCluster answers DescribeCluster with what Metadata says: the
// live brokers, the controller and the cluster id. Only brokers are
// described: strata's controller is one of them, not a separate quorum, so
// a request for controllers (v1+, KIP-919) is refused as a Kafka broker
// refuses it.
func (s *Server) describeCluster(r *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.EndpointType = 1
	if r.Version >= 1 && r.EndpointType != 1 {
		resp.ErrorCode = kerr.MismatchedEndpointType.Code
		msg := "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
		if r.EndpointType != 2 {
			resp.ErrorCode = kerr.UnsupportedEndpointType.Code
			msg = fmt.Sprintf("Unsupported endpoint type %d", r.EndpointType)
		}
		resp.ErrorMessage = &msg
		return resp
	}
	resp.ClusterID, resp.ControllerID = clusterID, s.cluster.Controller()
	for _, b := range s.cluster.Brokers() {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port = b.NodeID, b.Host, b.Port
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp
}
