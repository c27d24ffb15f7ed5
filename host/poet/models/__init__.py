"""Models and their training data: the zoo and the datasets."""
