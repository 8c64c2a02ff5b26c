package rls

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3" // typed_config
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3" // typed_extension_protocol_options
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/gateway/policy"
	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// yamlBlocks returns the ```yaml blocks of a Markdown text.
func yamlBlocks(md string) []string {
	var out []string
	for {
		i := strings.Index(md, "```yaml\n")
		if i < 0 {
			return out
		}
		md = md[i+len("```yaml\n"):]
		j := strings.Index(md, "```")
		if j < 0 {
			return out
		}
		out = append(out, md[:j])
		md = md[j:]
	}
}

// docs/envoy.md's copy-paste configuration holds: the Envoy bootstrap
// parses into go-control-plane's types with their validation rules (so
// every field name and value is one Envoy knows), its filter calls the
// policy's domain, and the descriptors its actions build match the limits
// the text says.
func TestEnvoyDocConfiguration(t *testing.T) {
	md, err := os.ReadFile("../../docs/envoy.md")
	require.NoError(t, err)
	blocks := yamlBlocks(string(md))
	require.Len(t, blocks, 2, "the policy file, then the Envoy bootstrap")

	var y any
	require.NoError(t, yaml.Unmarshal([]byte(blocks[1]), &y))
	j, err := json.Marshal(y)
	require.NoError(t, err)
	var bs bootstrapv3.Bootstrap
	require.NoError(t, protojson.Unmarshal(j, &bs), "the Envoy bootstrap")
	require.NoError(t, bs.ValidateAll())
	// Validation does not open typed_config: unpack the two filters that
	// matter and validate them too.
	hcm := &hcmv3.HttpConnectionManager{}
	require.NoError(t, bs.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(hcm))
	require.NoError(t, hcm.ValidateAll())
	rlf := &ratelimitv3.RateLimit{}
	require.NoError(t, hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(rlf))
	require.NoError(t, rlf.ValidateAll())
	assert.Equal(t, "cellserver", rlf.RateLimitService.GrpcService.GetEnvoyGrpc().ClusterName)

	pc, err := policy.Parse([]byte(blocks[0]))
	require.NoError(t, err, "the policy file")
	assert.Equal(t, []string{rlf.Domain}, pc.Domains())

	// The text's example request, as the virtual host's actions build it.
	st, err := store.New(store.Config{Shards: 2, Clock: &store.Clock{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	eng := gateway.New(gateway.Config{Service: service.New(service.Config{Store: st}), Policies: policy.Static(pc)})
	require.Len(t, hcm.GetRouteConfig().VirtualHosts[0].RateLimits, 3)
	for _, c := range []struct {
		user  string
		names []string // "" for unlimited
	}{
		{"ann", []string{"per-ip", "per-user-minute", "per-user-day"}},
		{"probe", []string{"per-ip", "", ""}}, // no user quota, its address still counts
	} {
		resp, err := NewService(eng, header.Default, nil).ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{
			Domain: rlf.Domain,
			Descriptors: []*rlv3.RateLimitDescriptor{
				desc("remote_address", "192.0.2.7"),
				desc("user", c.user),
				desc("generic_key", "daily", "user", c.user),
			},
		})
		require.NoError(t, err)
		for i, name := range c.names {
			if name == "" {
				assert.Nil(t, resp.Statuses[i].CurrentLimit, "%s %d: unlimited", c.user, i)
				continue
			}
			require.NotNil(t, resp.Statuses[i].CurrentLimit, "%s %d", c.user, i)
			assert.Equal(t, name, resp.Statuses[i].CurrentLimit.Name, "%s %d", c.user, i)
		}
	}
}
