package session

import (
	"strings"
	"testing"
)

func TestTheWindowRollsIntoImmutableChunks(t *testing.T) {
	s := longSession(t, 200)
	if len(s.Window) > MessageWindowSize || len(s.Window) < MessageWindowSize-MessageChunkSize {
		t.Errorf("window holds %d messages", len(s.Window))
	}
	all := s.Messages()
	if len(all) != 200 || s.MessageCount() != 200 {
		t.Fatalf("%d messages stored (count %d), want 200", len(all), s.MessageCount())
	}
	for i, m := range all {
		if m.Sequence != int64(i+1) {
			t.Fatalf("message %d has sequence %d", i, m.Sequence)
		}
	}
	next := int64(1)
	for i, c := range s.Chunks {
		if len(c.Messages) != MessageChunkSize || c.FirstSequence != next || c.LastSequence != next+MessageChunkSize-1 {
			t.Errorf("chunk %d = %d messages %d..%d", i, len(c.Messages), c.FirstSequence, c.LastSequence)
		}
		if ref := s.Index.Chunks[i]; ref.FirstSequence != c.FirstSequence || ref.LastSequence != c.LastSequence || ref.Bytes != c.Bytes {
			t.Errorf("index entry %d = %+v for chunk %d..%d", i, ref, c.FirstSequence, c.LastSequence)
		}
		next = c.LastSequence + 1
	}
	if s.Index.WindowFirstSequence != next || s.Window[0].Sequence != next || s.Index.FirstSequence != 1 {
		t.Errorf("index = window from %d (window starts %d), first %d", s.Index.WindowFirstSequence, s.Window[0].Sequence, s.Index.FirstSequence)
	}
}

func TestALargeMessageGetsItsOwnChunkInOrder(t *testing.T) {
	s := inTurn(t, "hi")
	s.store(Message{Role: RoleAssistant, Text: "short"})
	s.store(Message{Role: RoleTool, ToolCallID: "c1", Text: strings.Repeat("x", MessageChunkMaxBytes+1)})
	s.store(Message{Role: RoleAssistant, Text: "after"})
	if len(s.Chunks) != 2 || len(s.Chunks[1].Messages) != 1 || s.Chunks[1].FirstSequence != 3 || len(s.Window) != 1 {
		t.Fatalf("chunks %d (second holds %d from %d), window %d", len(s.Chunks), len(s.Chunks[1].Messages), s.Chunks[1].FirstSequence, len(s.Window))
	}
	var seqs []int64
	for _, m := range s.Messages() {
		seqs = append(seqs, m.Sequence)
	}
	if len(seqs) != 4 || seqs[0] != 1 || seqs[3] != 4 {
		t.Errorf("sequences = %v", seqs)
	}
}

func TestRetentionDeletesWholeChunksOnly(t *testing.T) {
	s := longSession(t, 300)
	s.Summary = &ContextSummary{LastSequence: 250}
	before := s.StoredBytes
	s.applyRetention(100)
	if len(s.Chunks) == 0 || s.Chunks[0].FirstSequence != s.DeletedBeforeSequence || s.Index.FirstSequence != s.DeletedBeforeSequence {
		t.Fatalf("after retention: first chunk %+v, deleted before %d, index %+v", s.Chunks[0].FirstSequence, s.DeletedBeforeSequence, s.Index)
	}
	if kept := s.MessageCount(); kept < 100 || kept >= 100+MessageChunkSize {
		t.Errorf("kept %d messages, want at least 100 and less than a chunk more", kept)
	}
	if s.StoredBytes >= before {
		t.Errorf("stored bytes %d, was %d", s.StoredBytes, before)
	}
}
