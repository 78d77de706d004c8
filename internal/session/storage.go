package session

import (
	"fmt"
	"slices"
)

// Message storage: the newest messages are the window; older ones move
// into immutable chunks, which retention deletes whole.
const (
	MessageWindowSize    = 64
	MessageChunkSize     = 32
	MessageChunkMaxBytes = 1 << 20
)

// MessageChunk is a run of consecutive older messages, never changed once
// written.
type MessageChunk struct {
	FirstSequence int64     `json:"firstSequence"`
	LastSequence  int64     `json:"lastSequence"`
	Bytes         int64     `json:"bytes"`
	Messages      []Message `json:"messages"`
}

// ChunkRef is the index's entry for one kept chunk.
type ChunkRef struct {
	FirstSequence int64 `json:"firstSequence"`
	LastSequence  int64 `json:"lastSequence"`
	Bytes         int64 `json:"bytes"`
}

// MessageIndex says where the stored messages are: each kept chunk, where
// the window starts, and the oldest stored message. It changes only when
// chunks are written or deleted.
type MessageIndex struct {
	Chunks              []ChunkRef `json:"chunks,omitempty"`
	WindowFirstSequence int64      `json:"windowFirstSequence,omitempty"`
	FirstSequence       int64      `json:"firstSequence,omitempty"`
}

// Messages returns every stored message in sequence order: the kept chunks,
// then the window.
func (s *State) Messages() []Message {
	if len(s.Chunks) == 0 {
		return s.Window
	}
	n := len(s.Window)
	for _, c := range s.Chunks {
		n += len(c.Messages)
	}
	out := make([]Message, 0, n)
	for _, c := range s.Chunks {
		out = append(out, c.Messages...)
	}
	return append(out, s.Window...)
}

// MessageCount is how many messages are stored.
func (s *State) MessageCount() int {
	n := len(s.Window)
	for _, c := range s.Chunks {
		n += len(c.Messages)
	}
	return n
}

// append stores one message: into the window, whose oldest messages move
// into chunks once it holds more than MessageWindowSize; a message larger
// than a chunk may hold goes into its own chunk, after the window's.
func (s *State) storeMessage(m Message) {
	size := messageBytes(m)
	s.StoredBytes += size
	if size > MessageChunkMaxBytes {
		for len(s.Window) > 0 {
			s.moveToChunk(min(len(s.Window), MessageChunkSize))
		}
		s.writeChunk([]Message{m})
		s.reindex()
		return
	}
	s.Window = append(s.Window, m)
	for len(s.Window) > MessageWindowSize {
		s.moveToChunk(MessageChunkSize)
	}
	s.reindex()
}

// moveToChunk moves up to n of the window's oldest messages into a new
// chunk, fewer when they would pass MessageChunkMaxBytes.
func (s *State) moveToChunk(n int) {
	var bytes int64
	take := 0
	for take < n && take < len(s.Window) {
		b := messageBytes(s.Window[take])
		if take > 0 && bytes+b > MessageChunkMaxBytes {
			break
		}
		bytes += b
		take++
	}
	s.writeChunk(slices.Clone(s.Window[:take]))
	s.Window = slices.Clone(s.Window[take:])
}

func (s *State) writeChunk(messages []Message) {
	c := MessageChunk{FirstSequence: messages[0].Sequence, LastSequence: messages[len(messages)-1].Sequence, Messages: messages}
	for _, m := range messages {
		c.Bytes += messageBytes(m)
	}
	s.Chunks = append(s.Chunks, c)
}

// reindex brings the index up to date with the chunks and the window.
func (s *State) reindex() {
	idx := MessageIndex{WindowFirstSequence: s.NextSequence, FirstSequence: s.NextSequence}
	if len(s.Window) > 0 {
		idx.WindowFirstSequence = s.Window[0].Sequence
		idx.FirstSequence = idx.WindowFirstSequence
	}
	for _, c := range s.Chunks {
		idx.Chunks = append(idx.Chunks, ChunkRef{FirstSequence: c.FirstSequence, LastSequence: c.LastSequence, Bytes: c.Bytes})
	}
	if len(s.Chunks) > 0 {
		idx.FirstSequence = s.Chunks[0].FirstSequence
	}
	s.Index = idx
}

// applyRetention deletes the oldest chunks while every message of a chunk
// is covered by the summary and at least retained messages are stored after
// it. The window is never deleted. Zero retains every message.
func (s *State) applyRetention(retained int) {
	if retained <= 0 || s.Summary == nil {
		return
	}
	after := s.MessageCount()
	deleted := 0
	for deleted < len(s.Chunks) {
		c := s.Chunks[deleted]
		if c.LastSequence > s.Summary.LastSequence || after-len(c.Messages) < retained {
			break
		}
		after -= len(c.Messages)
		s.StoredBytes -= c.Bytes
		s.DeletedBeforeSequence = c.LastSequence + 1
		deleted++
	}
	if deleted > 0 {
		s.Chunks = slices.Clone(s.Chunks[deleted:])
		s.reindex()
	}
}

// store appends a message to the active turn.
func (s *State) store(m Message) {
	m.Sequence = s.NextSequence
	if s.Turn != nil {
		m.TurnID = s.Turn.ID
	}
	s.NextSequence++
	s.storeMessage(m)
}

// messageBytes is about what a message adds to the state a session carries.
func messageBytes(m Message) int64 {
	n := len(m.Text) + len(m.TurnID) + len(m.ToolCallID) + len(m.ToolName) + imageBytes(m.Images) + 64
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	for _, o := range m.Output {
		n += len(o.Item) + len(o.Text)
	}
	return int64(n)
}

// MaxStoredMessageBytes is how much message content one session may store:
// its state travels in one payload when it continues as new, and Temporal
// refuses payloads over 2 MB. Compaction with a retention limit keeps a
// session under it however long it runs.
const MaxStoredMessageBytes = 1536 << 10

// StorageFull reports whether the session stores as much as it may carry;
// a turn that starts then fails before its model call.
func (s *State) StorageFull() bool {
	return s.StoredBytes > MaxStoredMessageBytes
}

// StorageFullError is the turn error of a session that stores too much.
func (s *State) StorageFullError() string {
	return fmt.Sprintf("the session stores %d bytes of messages, more than the %d one session may carry; "+
		"enable compaction with a retention limit, or start a new session", s.StoredBytes, int64(MaxStoredMessageBytes))
}
