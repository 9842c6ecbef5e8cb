"""vizlm app: ``streamlit run app.py``.

Registers the pages (``st.navigation``); the Explorer (``pages/explorer.py``) is the
front page. Every page is thin: sidebar inputs -> validation -> one library call ->
rendering; the shared Streamlit glue is :mod:`vizlm.app_support`.
"""

import streamlit as st


def main() -> None:
    st.set_page_config(page_title="vizlm", page_icon=":material/search:", layout="wide")
    pages = [
        st.Page("pages/explorer.py", title="Explorer", icon=":material/search:", default=True),
        st.Page("pages/compare.py", title="Compare perplexity", icon=":material/scatter_plot:"),
        st.Page("pages/positions.py", title="Attention by position", icon=":material/timeline:"),
        st.Page("pages/cases.py", title="Cases", icon=":material/label:"),
        st.Page("pages/models.py", title="Models", icon=":material/model_training:"),
    ]
    nav = st.navigation(pages)
    st.sidebar.caption("vizlm · attention in recurrent language models")
    nav.run()


main()
