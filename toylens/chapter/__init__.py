"""The chapter's commands that train model families (ladder, pre/post-norm, positions, scaling);
their measurements are probes.chapter's."""
