"""The read side: context blocks and the recent window, rendering within a budget, recall by
exact id, branch paging, and the status and view commands."""
