package manifests

import "testing"

// TestApplyKeepsReferencesDistinct: a delta to a well-formed manifest
// cannot make a segment and a base share a reference. Validate refuses it
// within one delta ("segment added twice, or at the offset of a new
// base"), so a manifest holding both cannot be sent whole: Full of it is
// refused. Plan refuses an added segment at a present base's reference,
// and a materialization's base at a present segment's it keeps;
// PlanSharingRefs, the rules before task-ack version 4, accepted both.
func TestApplyKeepsReferencesDistinct(t *testing.T) {
	m := Manifest{Bases: []Base{{Key: "b", Length: 10}}, Segments: []Segment{seg("log", 0, 1, 1, 1)}}
	if err := Full(m).Validate(); err != nil {
		t.Fatalf("well-formed manifest refused whole: %v", err)
	}
	for name, d := range map[string]Delta{
		"segment at a present base":     {AddSegments: []Segment{seg("b", 0, 5, 2, 2)}},
		"new base at a present segment": {Materialize: &Materialization{Bases: []Base{{Key: "log", Length: 1}}}},
	} {
		out, err := Apply(m, d)
		if err == nil {
			t.Errorf("%s: accepted, giving %+v, which Validate refuses whole: %v", name, out, Full(out).Validate())
		} else if code(err) != CodeDuplicate && code(err) != CodeAlreadyPresent {
			t.Errorf("%s: %v, want a duplicate or already-present refusal", name, err)
		}
	}
}

// TestDistinctRuleKeepsWhatItMustAccept: a base and a segment may use one
// reference at different times: a materialization whose new base is a
// segment it truncates or drops, and an added segment at a base the
// same delta's materialization replaces. And PlanSharingRefs, kept for
// the replay of task-ack entries before version 4, accepts what Plan now
// refuses.
func TestDistinctRuleKeepsWhatItMustAccept(t *testing.T) {
	m := Manifest{Bases: []Base{{Key: "b", Length: 10}}, Segments: []Segment{seg("log", 0, 1, 1, 1), seg("log", 1, 1, 2, 2)}}
	for name, d := range map[string]Delta{
		"new base at a segment it truncates": {Materialize: &Materialization{TruncateBefore: 2, Bases: []Base{{Key: "log", Length: 1}}}},
		"new base at a segment it drops":     {Materialize: &Materialization{Bases: []Base{{Key: "log", Offset: 1, Length: 1}}}, DropSegments: []Ref{{Key: "log", Offset: 1}}},
		"segment at a base it replaces":      {Materialize: &Materialization{Bases: []Base{{Key: "c", Length: 1}}}, AddSegments: []Segment{seg("b", 0, 5, 3, 3)}},
		"segment beside a base":              {AddSegments: []Segment{seg("b", 10, 5, 3, 3)}},
	} {
		out, err := Apply(m, d)
		if err != nil {
			t.Errorf("%s: refused: %v", name, err)
			continue
		}
		if err := Full(out).Validate(); err != nil {
			t.Errorf("%s: gave %+v, refused whole: %v", name, out, err)
		}
	}
	for name, d := range map[string]Delta{
		"segment at a present base":     {AddSegments: []Segment{seg("b", 0, 5, 3, 3)}},
		"new base at a present segment": {Materialize: &Materialization{Bases: []Base{{Key: "log", Length: 1}}}},
	} {
		if _, err := Plan(memView{m}, d); code(err) != CodeAlreadyPresent {
			t.Errorf("%s: Plan gave %v, want %s", name, err, CodeAlreadyPresent)
		}
		if _, err := PlanSharingRefs(memView{m}, d); err != nil {
			t.Errorf("%s: PlanSharingRefs refused: %v", name, err)
		}
	}
}
