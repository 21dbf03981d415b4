package metadata

import (
	"context"
	"errors"
	"maps"

	"strata/topicconfig"
)

// Alter is the one way a topic's configs change, whichever front end asks
// (Kafka's AlterConfigs and IncrementalAlterConfigs, the admin API): change
// makes the new configs from a copy of the current ones; a create-only key
// keeps its value (left out or deleted, it stays; a new value is refused);
// the result is checked against the broker's settings. With dryRun the
// checks run and nothing is written. A refused config is a
// *topicconfig.Error; a topic that does not exist ErrUnknownTopic.
func Alter(ctx context.Context, c Cluster, broker topicconfig.Broker, topic string, dryRun bool,
	change func(topicconfig.Overrides) (topicconfig.Overrides, error)) error {
	apply := func(cur map[string]string) (map[string]string, error) {
		next, err := change(maps.Clone(cur))
		if err != nil {
			return nil, err
		}
		if next == nil {
			next = topicconfig.Overrides{}
		}
		for _, k := range topicconfig.Keys {
			if !k.CreateOnly {
				continue
			}
			old, had := cur[k.Name]
			v, has := next[k.Name]
			switch {
			case !has && had:
				next[k.Name] = old
			case has && v != old:
				return nil, &topicconfig.Error{Key: k.Name, Value: v, Why: "it is fixed when the topic is created"}
			}
		}
		if err := topicconfig.Check(next, broker); err != nil {
			return nil, err
		}
		if dryRun {
			return nil, errDryRun
		}
		if len(next) == 0 {
			return nil, nil
		}
		return next, nil
	}
	err := c.AlterTopicConfigs(ctx, topic, apply)
	if errors.Is(err, errDryRun) {
		return nil
	}
	return err
}

// errDryRun ends a dry run's alter after its checks passed.
var errDryRun = errors.New("checked only")
