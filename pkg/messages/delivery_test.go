package messages

import (
	"strings"
	"testing"
)

func TestDeliveryDefaultsAndParsing(t *testing.T) {
	for _, tc := range []struct {
		def  ToolDefinition
		want Delivery
	}{
		{ToolDefinition{}, DeliveryAtLeastOnce},
		{ToolDefinition{Metadata: ToolMetadata{Tags: []string{TagNetwork}}}, DeliveryAtLeastOnce},
		{ToolDefinition{Metadata: ToolMetadata{Tags: []string{TagNetwork, TagDestructive}}}, DeliveryAtMostOnce},
		{ToolDefinition{Metadata: ToolMetadata{Tags: []string{TagDestructive}}, Delivery: DeliveryAtLeastOnce}, DeliveryAtLeastOnce},
		{ToolDefinition{Delivery: DeliveryAtMostOnce}, DeliveryAtMostOnce},
	} {
		if got := tc.def.EffectiveDelivery(); got != tc.want {
			t.Errorf("%+v: delivery %q, want %q", tc.def, got, tc.want)
		}
	}
	for _, s := range []string{"at_least_once", "at_most_once"} {
		if d, err := ParseDelivery(s); err != nil || string(d) != s {
			t.Errorf("ParseDelivery(%q) = %q, %v", s, d, err)
		}
	}
	if _, err := ParseDelivery("exactly_once"); err == nil || !strings.Contains(err.Error(), `"exactly_once"`) {
		t.Errorf("ParseDelivery(exactly_once): %v", err)
	}
}
