"""Results made readable: charts and highlighted HTML (``plots``, ``faithfulness_plots``), static
notebook views (``notebook``), files out (``export``, with pictures drawn by ``render`` in a child
process), an analysis as JSON and back (``serialize``), the app's URL state (``links``) and result
tables (``tables``). Draws what ``vizlm.inspect`` computed; never runs a model on its own."""
