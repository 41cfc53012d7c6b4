"""What people read of a cycle or a change (pure: values in, text or rows out).

The package, one concern a module (each says what must live in it):

- ``queue_view``: the queue management view: rows, queue and operation detail;
- ``web_html``: the server-rendered HTML of those pages;
- ``plan_render``: a plan as JSON (the CLI contract), text and Markdown;
- ``diff``: pull-request plans: two revisions compiled, planned and compared;
- ``replay_render``: the what-if replay of a pull-request plan, as Markdown and JSON.
"""
