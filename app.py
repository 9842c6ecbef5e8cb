"""vizlm Explorer (minimal until the app issue): type a sentence, see per-word probabilities."""

import streamlit as st

from vizlm.analysis import AnalysisError, analyze
from vizlm.checkpoint import bundled_checkpoints, load_checkpoint

st.set_page_config(page_title="vizlm", layout="wide")


@st.cache_resource
def _load(name: str):
    return load_checkpoint(name)


st.title("vizlm")
names = bundled_checkpoints()
if not names:
    st.error("No checkpoints in checkpoints/.")
    st.stop()
name = st.selectbox("Model", names)
text = st.text_input("Sentence", "the dogs in the park are barking .")
try:
    sa = analyze(_load(name), text)
except AnalysisError as exc:
    st.warning(str(exc))
    st.stop()
st.dataframe({"word": sa.targets, "prob": sa.probs, "surprisal (bits)": sa.surprisal})
