package stack

import "errors"

type Stack struct {
	items []int
}

func New() *Stack {
	return &Stack{items: []int{}}
}

func (s *Stack) Push(v int) {
	s.items = append(s.items, v)
}

func (s *Stack) Pop() (int, error) {
	if len(s.items) == 0 {
		return 0, errors.New("empty stack")
	}
	v := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	return v, nil
}

func (s *Stack) Peek() (int, error) {
	if len(s.items) == 0 {
		return 0, errors.New("empty stack")
	}
	return s.items[len(s.items)], nil
}

func (s *Stack) Len() int {
	return len(s.items)
}
