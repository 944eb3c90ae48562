"""The languages the lexical analyzer stems Latin-script text in, and how a chunk's is told
by its stop words (docs/architecture.md, "Chunk languages"). Part of the analyzer: a change
here bumps `kernel.text_analysis.ANALYZER_VERSION`.
"""

from __future__ import annotations

# Keyed by the codes of `kernel.text_analysis.LANGUAGES`.
MIN_STOP_WORDS = 3  # distinct ones
MIN_SHARE = 0.05  # of a chunk's tokens (French prose: ~0.3; a tldr page, half commands: ~0.1-0.2)
# Languages often written without accents; a plain-ASCII chunk of any other had its accents
# stripped, and is stemmed in English.
UNACCENTED = frozenset({"nl", "id", "it"})

# Words common in English text (besides the analyzer's English stop words) that other lists
# would otherwise hold: never evidence of another language.
ENGLISH_LOOKALIKES = frozenset(
    "die per come non var men an in is so was will man also war hat pro ai co al "  # noqa: SIM905
    "no me he do as at to by on of or be we us it am".split()
)

_STOP_WORDS = {
    "fr": "le la les des du un une et est dans pour pas que qui sur au aux avec ce cette ces "
    "son sa ses sont par il elle nous vous leur leurs plus mais comme être tout très sans "
    "peut",
    "de": "der das und ist nicht ein eine einen einem einer des dem den zu mit von auf für "
    "sich auch werden wird oder wenn nach bei aus wie nur noch kann sind dass über im zum "
    "zur durch alle eines",
    "es": "de la en un que el los las del por con una para es se su lo como más pero sus al "
    "está este esta son hay muy sin sobre también desde todo cuando puede entre ya donde",
    "pt": "de que os do da dos das um uma em na não com para por mais ao se seu sua ou quando "
    "muito também isso este esta ser são pelo pela como",
    "it": "il lo la gli le di del della dei delle un una uno che con si sono è nel nella al "
    "alla anche più questo questa essere ma",
    "nl": "de het een van en dat op te zijn niet met voor er als ook aan bij maar om dan naar "
    "wordt deze kan uit worden",
    "sv": "och att det som en är av för med till den har inte på om ett jag de sig så ska kan "
    "eller från vid",
    "da": "og at det er en til på som de med har af for ikke den et der kan om vil eller fra "
    "efter også",
    "no": "og det er som en til på av for med har ikke den et de seg kan om vil eller fra "
    "etter også jeg",
    "fi": "ja on ei se että oli hän ovat kun mutta tai myös kuin jos ole voi sekä tämä niin joka",
    "pl": "na nie się jest że jak po od za tak ale dla przez oraz lub jego może są być aby "
    "jako albo przy bez jeśli",
    "cs": "se na je že v s z do jako ale pro jsou jeho nebo tak jak po od jsem který která "
    "které být",
    "ro": "și în de la cu nu că pe din un se sunt pentru mai care ca sau ale al lui fi dar",
    "hu": "az és hogy nem egy meg van de csak ez el ha már mint vagy volt kell lesz még ki",
    "tr": "ve bir bu da de için ile ne olarak daha çok gibi ama en kadar sonra olan değil",
    "id": "yang dan di ke dari ini itu dengan untuk tidak dalam akan pada juga ada oleh atau "
    "karena bisa sudah",
}


def stop_words() -> dict[str, frozenset[str]]:
    """Each language's detection words: English lookalikes and single letters left out (an
    initial, `u s`, `w` of a list of terms)."""
    return {
        code: frozenset(w for w in words.split() if len(w) > 1) - ENGLISH_LOOKALIKES
        for code, words in _STOP_WORDS.items()
    }
