package verification

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PickupHint explains, for a run of kargo-latch's that no analysis
// controller picked up, the likely cause: the controller-instance-id
// label. An Argo Rollouts controller started with --instance-id X runs only
// runs labelled X, and one started without runs only unlabelled runs
// (kargo-api-facts.md §13.5). Kargo labels its runs from its own
// ROLLOUTS_CONTROLLER_INSTANCE_ID, so Kargo's runs in the namespace show
// what the analysis controller Kargo uses expects; a difference from
// kargo-latch's setting is a mismatch found, not guessed.
func (s *Starter) PickupHint(ctx context.Context, namespace string) string {
	ours := s.InstanceID
	theirs, err := s.kargosInstanceIDs(ctx, namespace)
	switch {
	case err == nil && len(theirs) > 0 && !slices.Contains(theirs, ours):
		return fmt.Sprintf("the likely cause is a controller-instance-id mismatch: kargo-latch labels its runs %s (--rollouts-controller-instance-id), "+
			"while Kargo's own runs in this project carry %s; set --rollouts-controller-instance-id (chart value controller.rolloutsControllerInstanceID) to Kargo's ROLLOUTS_CONTROLLER_INSTANCE_ID",
			describeInstance(ours), describeList(theirs))
	case ours == "":
		return "is an Argo Rollouts analysis controller running, and started without --instance-id? kargo-latch's runs carry no controller-instance-id label " +
			"(--rollouts-controller-instance-id is empty), and a controller with an --instance-id runs only runs labelled with it"
	}
	return fmt.Sprintf("is an Argo Rollouts analysis controller running with --instance-id %s? kargo-latch labels its runs so "+
		"(--rollouts-controller-instance-id); it must be Kargo's ROLLOUTS_CONTROLLER_INSTANCE_ID", ours)
}

// kargosInstanceIDs lists the controller-instance-id labels of a few of
// Kargo's own runs in the namespace ("" for unlabelled ones), sorted.
func (s *Starter) kargosInstanceIDs(ctx context.Context, namespace string) ([]string, error) {
	list, err := s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: StageLabel + ",!" + MarkerLabel, Limit: 20,
	})
	if err != nil {
		return nil, err
	}
	var ids []string
	for i := range list.Items {
		if id := list.Items[i].GetLabels()[InstanceIDLabel]; !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

func describeInstance(id string) string {
	if id == "" {
		return "with no controller-instance-id label"
	}
	return "controller-instance-id=" + id
}

func describeList(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = describeInstance(id)
	}
	return strings.Join(out, " or ")
}
