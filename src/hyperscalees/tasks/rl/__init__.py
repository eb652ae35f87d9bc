"""Reinforcement-learning environments that step a whole population of episodes as batched tensors."""
