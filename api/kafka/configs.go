package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
	"strata/metadata"
	"strata/topicconfig"
)

// topicConfig is what a topic's configs come to: its overrides over the
// broker's settings over the defaults.
func (s *Server) topicConfig(topic string) topicconfig.Resolved {
	return topicconfig.Resolve(s.cluster.TopicConfigs(topic), s.cfg.TopicDefaults)
}

// configError is the answer to a refused config: INVALID_CONFIG with a
// message that names the key and why.
func configError(err error) (int16, *string) {
	var ce *topicconfig.Error
	if errors.As(err, &ce) {
		msg := ce.Error()
		return kerr.InvalidConfig.Code, &msg
	}
	msg := err.Error()
	return kerr.UnknownServerError.Code, &msg
}

// requestConfigs collects a request's key=value pairs; a key given twice is
// refused, as Kafka does.
func requestConfigs[C any](cs []C, kv func(C) (string, *string)) (topicconfig.Overrides, error) {
	out := topicconfig.Overrides{}
	for _, c := range cs {
		k, v := kv(c)
		if _, dup := out[k]; dup {
			return nil, invalidRequest("Error due to duplicate config keys")
		}
		if v == nil {
			return nil, &topicconfig.Error{Key: k, Message: "Null value not supported for topic configs: " + k}
		}
		out[k] = *v
	}
	return out, nil
}

// createTopicConfigs checks a CreateTopics request's configs.
func (s *Server) createTopicConfigs(t kmsg.CreateTopicsRequestTopic) (topicconfig.Overrides, int16, *string) {
	o, err := requestConfigs(t.Configs, func(c kmsg.CreateTopicsRequestTopicConfig) (string, *string) { return c.Name, c.Value })
	var ce *topicconfig.Error
	switch {
	case err != nil && !errors.As(err, &ce):
		msg := err.Error()
		return nil, kerr.InvalidRequest.Code, &msg
	case err != nil:
		code, msg := configError(err)
		return nil, code, msg
	}
	if err := topicconfig.Check(o, s.cfg.TopicDefaults); err != nil {
		code, msg := configError(err)
		return nil, code, msg
	}
	if len(o) == 0 {
		return nil, errNone, nil
	}
	return o, errNone, nil
}

// createdConfigs is a new topic's configs as CreateTopics v5+ answers
// them; clients (the Java Admin client) expect the list.
func (s *Server) createdConfigs(o topicconfig.Overrides) []kmsg.CreateTopicsResponseTopicConfig {
	out := []kmsg.CreateTopicsResponseTopicConfig{}
	for _, e := range topicconfig.Describe(o, s.cfg.TopicDefaults) {
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		v := e.Value
		c.Name, c.Value, c.ReadOnly, c.Source = e.Name, &v, e.ReadOnly, int8(e.Source)
		out = append(out, c)
	}
	return out
}

func (s *Server) describeConfigs(ctx context.Context, r *kmsg.DescribeConfigsRequest, deny func(kmsg.ConfigResourceType, string) int16) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	topics, topicsErr := s.topics(ctx)
	if topicsErr != nil {
		s.log.Error("kafka: describe configs: listing topics", "err", topicsErr)
	}
	for _, res := range r.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		var entries []topicconfig.Entry
		if code := deny(res.ResourceType, res.ResourceName); code != errNone {
			rr.ErrorCode = code
			resp.Resources = append(resp.Resources, rr)
			continue
		}
		switch res.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			if store.ValidateTopic(res.ResourceName) != nil {
				rr.ErrorCode = kerr.InvalidTopicException.Code
				break
			}
			if topicsErr != nil {
				rr.ErrorCode = kerr.UnknownServerError.Code
				break
			}
			if _, ok := topics[res.ResourceName]; !ok {
				rr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				rr.ErrorMessage = new(string) // Kafka says nothing more
				break
			}
			entries = topicconfig.Describe(s.cluster.TopicConfigs(res.ResourceName), s.cfg.TopicDefaults)
		case kmsg.ConfigResourceTypeBroker:
			if code, msg := s.brokerResource(res.ResourceName); code != errNone {
				rr.ErrorCode, rr.ErrorMessage = code, msg
				break
			}
			entries = topicconfig.DescribeBroker(s.cfg.TopicDefaults)
		default:
			rr.ErrorCode = kerr.InvalidRequest.Code
			msg := fmt.Sprintf("strata describes the configs of topics and brokers, not of %s resources", res.ResourceType)
			rr.ErrorMessage = &msg
		}
		for _, e := range entries {
			if res.ConfigNames != nil && !slices.Contains(res.ConfigNames, e.Name) {
				continue
			}
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			v := e.Value
			c.Name, c.Value, c.ReadOnly, c.Source, c.ConfigType = e.Name, &v, e.ReadOnly, kmsg.ConfigSource(e.Source), kmsg.ConfigType(e.Type)
			c.IsDefault = e.Source == topicconfig.Default && r.Version == 0
			if r.IncludeSynonyms {
				for _, syn := range e.Synonyms {
					sv := syn.Value
					c.ConfigSynonyms = append(c.ConfigSynonyms, kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{Name: syn.Name, Value: &sv, Source: kmsg.ConfigSource(syn.Source)})
				}
			}
			if r.IncludeDocumentation {
				doc := e.Doc
				c.Documentation = &doc
			}
			rr.Configs = append(rr.Configs, c)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// brokerResource checks a BROKER resource's name: this node's id, or ""
// for the default every broker shares (its settings come from the config
// file either way).
func (s *Server) brokerResource(name string) (int16, *string) {
	if name == "" {
		return errNone, nil
	}
	id, err := strconv.ParseInt(name, 10, 32)
	if err == nil && int32(id) == s.cluster.Self() {
		return errNone, nil
	}
	msg := fmt.Sprintf("Unexpected broker id, expected %d or empty string, but received %s", s.cluster.Self(), name)
	return kerr.InvalidRequest.Code, &msg
}

// alterOne is one resource of an AlterConfigs or IncrementalAlterConfigs
// request: change makes the topic's new configs from its current ones.
func (s *Server) alterOne(ctx context.Context, kind kmsg.ConfigResourceType, name string, validateOnly bool,
	change func(topicconfig.Overrides) (topicconfig.Overrides, error)) (int16, *string) {
	msgf := func(format string, args ...any) *string { m := fmt.Sprintf(format, args...); return &m }
	switch kind {
	case kmsg.ConfigResourceTypeTopic:
	case kmsg.ConfigResourceTypeBroker:
		if code, msg := s.brokerResource(name); code != errNone {
			return code, msg
		}
		return kerr.InvalidRequest.Code, msgf("strata's broker settings come from its config file (docs/config.md): set them there")
	default:
		return kerr.InvalidRequest.Code, msgf("strata alters the configs of topics, not of %s resources", kind)
	}
	if store.ValidateTopic(name) != nil {
		return kerr.InvalidTopicException.Code, nil
	}
	topics, err := s.topics(ctx)
	if err != nil {
		return kerr.UnknownServerError.Code, nil
	}
	if _, ok := topics[name]; !ok {
		return kerr.UnknownTopicOrPartition.Code, msgf("The topic '%s' does not exist.", name)
	}
	err = metadata.Alter(ctx, s.cluster, s.cfg.TopicDefaults, name, validateOnly, change)
	switch {
	case err == nil:
		if !validateOnly {
			s.log.Info("topic configs altered", "topic", name, "configs", s.cluster.TopicConfigs(name))
		}
		return errNone, nil
	case errors.Is(err, metadata.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code, msgf("The topic '%s' does not exist.", name)
	}
	var ce *topicconfig.Error
	if errors.As(err, &ce) {
		return configError(err)
	}
	var ir invalidRequest
	if errors.As(err, &ir) {
		return kerr.InvalidRequest.Code, msgf("%s", err.Error())
	}
	s.log.Error("kafka: altering topic configs", "topic", name, "err", err)
	return kerr.UnknownServerError.Code, nil
}

// duplicates are the resources named more than once in a request: Kafka
// answers each of their entries INVALID_REQUEST.
func duplicates[R any](rs []R, id func(R) string) map[string]bool {
	seen, dup := map[string]bool{}, map[string]bool{}
	for _, r := range rs {
		k := id(r)
		dup[k] = seen[k]
		seen[k] = true
	}
	return dup
}

// alterResource answers one resource of AlterConfigs or
// IncrementalAlterConfigs: a resource named twice is refused as Kafka
// refuses it, then the user's permission, then the change itself.
func (s *Server) alterResource(ctx context.Context, kind kmsg.ConfigResourceType, name string, dup map[string]bool, validateOnly bool,
	deny func(kmsg.ConfigResourceType, string) int16, change func(topicconfig.Overrides) (topicconfig.Overrides, error)) (int16, *string) {
	if dup[fmt.Sprint(kind, "/", name)] {
		msg := "Each resource must appear at most once."
		return kerr.InvalidRequest.Code, &msg
	}
	if code := deny(kind, name); code != errNone {
		return code, nil
	}
	return s.alterOne(ctx, kind, name, validateOnly, change)
}

func (s *Server) alterConfigs(ctx context.Context, r *kmsg.AlterConfigsRequest, deny func(kmsg.ConfigResourceType, string) int16) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
	dup := duplicates(r.Resources, func(res kmsg.AlterConfigsRequestResource) string {
		return fmt.Sprint(res.ResourceType, "/", res.ResourceName)
	})
	for _, res := range r.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		rr.ErrorCode, rr.ErrorMessage = s.alterResource(ctx, res.ResourceType, res.ResourceName, dup, r.ValidateOnly, deny,
			func(topicconfig.Overrides) (topicconfig.Overrides, error) {
				// AlterConfigs replaces the whole set: what it leaves out goes back to the broker's.
				return requestConfigs(res.Configs, func(c kmsg.AlterConfigsRequestResourceConfig) (string, *string) { return c.Name, c.Value })
			})
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

func (s *Server) incrementalAlterConfigs(ctx context.Context, r *kmsg.IncrementalAlterConfigsRequest, deny func(kmsg.ConfigResourceType, string) int16) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	dup := duplicates(r.Resources, func(res kmsg.IncrementalAlterConfigsRequestResource) string {
		return fmt.Sprint(res.ResourceType, "/", res.ResourceName)
	})
	for _, res := range r.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		rr.ErrorCode, rr.ErrorMessage = s.alterResource(ctx, res.ResourceType, res.ResourceName, dup, r.ValidateOnly, deny,
			func(cur topicconfig.Overrides) (topicconfig.Overrides, error) { return incremental(cur, res.Configs) })
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// incremental applies IncrementalAlterConfigs' operations in order: SET,
// DELETE (back to the broker's value), and APPEND and SUBTRACT, which only
// list configs take.
func incremental(cur topicconfig.Overrides, ops []kmsg.IncrementalAlterConfigsRequestResourceConfig) (topicconfig.Overrides, error) {
	if cur == nil {
		cur = topicconfig.Overrides{}
	}
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op.Name] {
			return nil, invalidRequest("Error due to duplicate config keys")
		}
		seen[op.Name] = true
		k, known := topicconfig.Lookup(op.Name)
		if !known {
			return nil, &topicconfig.Error{Key: op.Name, Unknown: true}
		}
		value := ""
		if op.Value != nil {
			value = *op.Value
		}
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if op.Value == nil {
				return nil, &topicconfig.Error{Key: op.Name, Message: "Null value not supported for : " + op.Name}
			}
			cur[op.Name] = value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(cur, op.Name)
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			if k.Type != topicconfig.List {
				return nil, &topicconfig.Error{Key: op.Name, Message: fmt.Sprintf("Can't %s to key %s because its type is not LIST.", op.Op, op.Name)}
			}
			list, _ := topicconfig.Value(k, cur, nil)
			items := topicconfig.SplitList(list)
			for _, v := range topicconfig.SplitList(value) {
				has := slices.Contains(items, v)
				switch {
				case op.Op == kmsg.IncrementalAlterConfigOpAppend && !has:
					items = append(items, v)
				case op.Op == kmsg.IncrementalAlterConfigOpSubtract && has:
					items = slices.DeleteFunc(items, func(x string) bool { return x == v })
				}
			}
			cur[op.Name] = strings.Join(items, ",")
		default:
			return nil, invalidRequest(fmt.Sprintf("Error due to unknown config operation %d for %s", op.Op, op.Name))
		}
	}
	return cur, nil
}

// invalidRequest is an alter request Kafka refuses as a whole
// (INVALID_REQUEST), in Kafka's words.
type invalidRequest string

func (e invalidRequest) Error() string { return string(e) }
