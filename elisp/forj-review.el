;;; forj-review.el --- Review and approve the tool calls of a batch  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; When a batch has calls that need the user's consent, one review buffer
;; lists them all: each with its risk (high risk marked), its summary and,
;; for edits, the unified diff the worker will apply, across all files of
;; the batch in one place.  Nothing runs until the decisions are
;; committed; leaving the buffer without committing denies everything.
;;
;;   a  approve the call at point      d  deny it
;;   r  deny it with a reason (the model reads the reason)
;;   e  edit the proposed text in ediff, then approve it as edited
;;   +  approve the hunk at point      -  drop it
;;   _  drop the hunk at point with a reason (the model reads it)
;;   M-n / M-p  next / previous hunk
;;   A  approve all                    D  deny all
;;   C-c C-c  commit the decisions     q  deny all and commit
;;   C-g  cancel the batch: nothing runs, and a chat does not go on
;;   s  approve, and grant the same for this chat's session
;;   m  approve, and grant it for N minutes
;;   !  approve, and grant it always, for this project
;;   ?  show or hide the list of keys
;;
;; A grant key proposes the worker's narrowest rule for the call (such
;; as run_shell(pytest *)) in the minibuffer, to edit before granting;
;; later calls it covers run without a review, for as long as the
;; grant's scope lasts.  Each call shows the sentence that decided it
;; needs review.  When the configuration sets a review timeout, an
;; unanswered review closes by itself, every call denied.
;;
;; Editing before approving: `e' fetches the call's proposal from the
;; worker (the file as it is and as the call would leave it) and opens
;; both in ediff; the proposed side is editable.  When ediff quits, what
;; the proposed buffer holds is what will be written, and the result
;; tells the model the user modified the change and shows what was
;; written.
;;
;; What the review shows is what will run or be written, whatever the
;; text tries: long lines wrap (a continuation starts with a mark), long
;; runs of blanks and of blank lines are shown as counts, previews sit
;; behind a gutter that no text can draw, and invisible or format
;; characters are shown as markers like ⟨U+00AD⟩ with a warning at the
;; top.  A review that appears while the user types elsewhere ignores
;; its decision keys until its window is selected and
;; `forj-review-input-delay' has passed without keys typed elsewhere.
;;
;; Approving in part: on a diff's hunk, `+' approves that hunk and `-'
;; drops it, as magit stages hunks.  The call is then approved in part:
;; each hunk shows [+] (approved) or [-] (dropped) on a line of its own,
;; and only the approved hunks are written.  The first hunk key on a call
;; not yet decided decides the other hunks the opposite way (`-' on one
;; hunk: all but this one; `+': only this one); a denied call's other
;; hunks stay dropped.  Every hunk approved is
;; the plain approval; every hunk dropped, a denial.  A call that moves or
;; deletes files, and a file edited in ediff, are decided whole.
;;
;; The batch flow (forj-tools.el) opens this buffer and gets the
;; decisions back through a callback.

;;; Code:

(require 'cl-lib)
(require 'diff-mode)
(require 'subr-x)
(require 'forj)

(defface forj-review-high-risk
  '((t :inherit error :weight bold))
  "Face for the risk label of high-risk calls."
  :group 'forj)

(defface forj-review-approved
  '((t :inherit success :weight bold))
  "Face for an approved call's state."
  :group 'forj)

(defface forj-review-denied
  '((t :inherit warning :weight bold))
  "Face for a denied call's state."
  :group 'forj)

(defface forj-review-dropped-hunk
  '((t :inherit shadow :strike-through t))
  "Face added to the lines of a hunk the user dropped."
  :group 'forj)

;; Faces for what the review adds to the text it shows.

(defface forj-review-warning
  '((t :inherit warning :weight bold))
  "Face for warnings: a call's own warnings and the review's header warning."
  :group 'forj)

(defface forj-review-marker
  '((t :inherit escape-glyph :box (:line-width -1)))
  "Face for markers standing for text the review does not show as it is.
Invisible characters (⟨U+200B⟩), long runs of blanks (⟨80 spaces⟩) and
of blank lines (⟨200 blank lines⟩)."
  :group 'forj)

(defface forj-review-gutter
  '((t :inherit shadow))
  "Face for the gutter before each line of a preview, and for wrap marks."
  :group 'forj)

(defcustom forj-display-review
  '((display-buffer-reuse-window display-buffer-below-selected))
  "Where the review buffer opens, as a `display-buffer' action.
The default is a new window below the selected one.  When the review
ends (committed, cancelled or killed), the windows are put back as
they were before it opened, unless you changed them meanwhile.  An
entry of `display-buffer-alist' matching `*forj-review*' takes
precedence."
  :type '(cons (choice (function :tag "Function")
                       (repeat :tag "Functions" function))
               (alist :tag "Action alist"))
  :group 'forj)

(defcustom forj-review-input-delay 0.6
  "Seconds a new review ignores its decision keys.
A review can appear while you type elsewhere, in the chat for
instance; the keys meant for the chat must not approve what you have
not seen.  The decision keys (approve, deny, all, edit, commit, quit,
cancel) act only when the review window is selected and this many
seconds have passed since the review appeared, since the last key you
typed in another buffer, and since the last key the review ignored.
Moving around the review is never delayed."
  :type 'number
  :group 'forj)

;;; Showing text truthfully

(defconst forj-review--blank-run-width 64
  "Runs of blanks at least this many columns wide are shown as a count.")

(defvar forj-review--invisible-re-cache nil
  "The regexp `forj-review--invisible-re' builds once.")

(defun forj-review--invisible-re ()
  "A regexp matching the characters the review draws as ⟨U+XXXX⟩ markers.
Unicode general categories Cf (format: soft hyphen, zero-width and bidi
controls, tags), Zs other than the space, Zl, Zp and Co (private use),
from Emacs's own Unicode data, and the rest of the characters Unicode
says a display draws as nothing (Default_Ignorable_Code_Point): the
combining grapheme joiner, the Hangul and Khmer fillers, the Mongolian
and all the variation selectors (those of U+E0100..U+E01EF carry a
byte each, so a program can hide in an empty-looking string), and the
whole block U+E0000..U+E0FFF.  The worker marks the same set."
  (or forj-review--invisible-re-cache
      (let ((ranges (list (cons #x034F #x034F) (cons #x115F #x1160) (cons #x17B4 #x17B5)
                          (cons #x180B #x180F) (cons #x2065 #x2065) (cons #x3164 #x3164)
                          (cons #xFE00 #xFE0F) (cons #xFFA0 #xFFA0) (cons #xFFF0 #xFFF8)
                          (cons #xE0000 #xE0FFF))))
        (map-char-table
         (lambda (key category)
           (when (memq category '(Cf Zs Zl Zp Co))
             (let ((from (if (consp key) (car key) key))
                   (to (min #x10FFFF (if (consp key) (cdr key) key))))
               (when (<= from to)
                 (push (cons from to) ranges)))))
         (unicode-property-table-internal 'general-category))
        (setq forj-review--invisible-re-cache
              (concat "["
                      (mapconcat (lambda (range)
                                   (let ((from (car range)) (to (cdr range)))
                                     (if (= from ?\s)
                                         ;; The plain space is the one Zs character shown as it is.
                                         (if (= to ?\s) "" (format "%c-%c" (1+ from) to))
                                       (if (= from to) (string from) (format "%c-%c" from to)))))
                                 ranges "")
                      "]")))))

(defun forj-review--marker (text)
  "TEXT as a marker: in `forj-review-marker', so no quoted text can pass for one."
  (propertize text 'face 'forj-review-marker))

(defun forj-review-mark-invisible (text)
  "TEXT with every invisible or format character shown as a ⟨U+XXXX⟩ marker.
Markers the worker already wrote into TEXT get the marker face too."
  (let ((case-fold-search nil))
    (when (string-match-p (forj-review--invisible-re) text)
      (setq text (replace-regexp-in-string
                  (forj-review--invisible-re)
                  (lambda (char) (forj-review--marker (format "⟨U+%04X⟩" (aref char 0))))
                  text t t)))
    (let ((start 0))
      ;; The caller's string (a plan item's) keeps no face of ours.
      (when (string-match-p "⟨U\\+[0-9A-F]\\{4,6\\}⟩" text)
        (setq text (copy-sequence text)))
      (while (string-match "⟨U\\+[0-9A-F]\\{4,6\\}⟩" text start)
        (add-face-text-property (match-beginning 0) (match-end 0) 'forj-review-marker nil text)
        (setq start (match-end 0))))
    text))

(defun forj-review--mark-blank-runs (text)
  "TEXT with each wide run of blanks shown as a count.
Wide: `forj-review--blank-run-width' columns or more.  A command padded
with spaces cannot push its tail out of sight."
  (if (not (string-match-p "[ \t]\\{16,\\}" text))
      text
    (replace-regexp-in-string
     "[ \t]\\{16,\\}"
     (lambda (run)
       (let ((tabs (cl-count ?\t run)))
         (if (< (+ (- (length run) tabs) (* 8 tabs)) forj-review--blank-run-width)
             run
           (forj-review--marker
            (if (zerop tabs)
                (format "⟨%d spaces⟩" (length run))
              (format "⟨%d spaces and tabs⟩" (length run)))))))
     text t t)))

(defun forj-review-visible-text (text)
  "TEXT as drawn in the review, with invisible characters and wide blanks marked."
  (forj-review--mark-blank-runs (forj-review-mark-invisible (or text ""))))

(defun forj-review--blank-content-p (line blank-re)
  "Non-nil if LINE matches BLANK-RE, a prefix and nothing but blanks.
Return what the prefix's first group matched in LINE (\"\" if
nothing): lines of one run of blanks share it, whatever blanks
surround it."
  (and (string-match blank-re line)
       (or (match-string 1 line) "")))

(defun forj-review--collapse-blank-lines (lines prefix-re)
  "LINES with each run of more than two blank lines shown as one counted line.
A line is blank if only blanks follow its prefix (matched by
PREFIX-RE, e.g. a diff's +, - or space, or a quoted block's line
mark); the lines of one run share their prefix, which the counted
line keeps."
  (let ((out nil)
        (blank-re (concat "\\`" prefix-re "[ \t]*\\'")))
    (while lines
      (let* ((prefix (forj-review--blank-content-p (car lines) blank-re))
             (count 0)
             (rest lines))
        (while (and prefix rest
                    (equal (forj-review--blank-content-p (car rest) blank-re) prefix))
          (setq count (1+ count) rest (cdr rest)))
        (if (> count 2)
            (progn
              (push (concat prefix (forj-review--marker (format "⟨%d blank lines⟩" count))) out)
              (setq lines rest))
          (push (car lines) out)
          (setq lines (cdr lines)))))
    (nreverse out)))

(defun forj-review--lines (text)
  "TEXT split into lines, keeping blank ones; a final newline ends the last line."
  (let ((lines (split-string text "\n")))
    (if (and (cdr lines) (equal (car (last lines)) ""))
        (butlast lines)
      lines)))

;;; The buffer

(defvar-local forj-review--items nil
  "The plan items under review, each a plist from the worker.")

(defvar-local forj-review--decisions nil
  "Hash table: call id -> t (approved) or (deny . REASON).")

(defvar-local forj-review-callback nil
  "Function called once with the decisions.
Its arguments: the approved ids, an alist of denied ids and reasons,
an alist of modified ids, each with an alist of paths and the text the
user wants written there, whether the batch was cancelled, an alist of
grants, and an alist of the ids approved in part, each with its
`forj-review--hunks-field'.")

(defvar-local forj-review--proposal-function nil
  "Function fetching a call's proposal, or nil when editing is not offered.
Called with the call id, a function to call with the list of files
\(plists with :path, :old, :new) and a function to call with an error
plist.")

(defvar-local forj-review--modified nil
  "Hash table: call id -> alist of (PATH . TEXT) the user wrote instead.")

(defvar-local forj-review--drawn-previews nil
  "Hash table: call id -> its preview as drawn; a redraw reuses it.")

(defvar-local forj-review-windows nil
  "How to put the windows back when the review ends: (CONFIGURATION FRAME WINDOWS).
CONFIGURATION is the frame's window configuration before the review
opened; WINDOWS the frame's windows once it showed.  The windows are
put back only if they are still those: a layout the user changed
since is left alone.")

(defvar-local forj-review--user-diffs nil
  "Hash table: call id -> alist of (PATH . DIFF) of the user's edited text.
DIFF is the unified diff from the file as it is to the user's text, or
the symbol `pending' while it is computed.")

(defvar-local forj-review--hunks nil
  "Hash table: call id -> the user's word on its hunks, if approved in part.
An alist of ((PATH . INDEX) . STATE), one entry per hunk of each file
the call lets decide; STATE is `approved' or (dropped . REASON).")

(defvar-local forj-review--whole-only nil
  "Hash table: call id -> t if the call can only be decided whole.
Its drawn diff does not show the hunks the worker counts (see
`forj-review--check-hunks').")

(defvar-local forj-review--grants nil
  "Hash table: call id -> the standing grant given with its approval.
A plist (:scope SCOPE :minutes N :pattern RULE); SCOPE is \"session\",
\"minutes\" or \"project\".")

(defvar-local forj-review--options nil
  "What the plan said about this review: a plist with :timeout and :mode-note.")

(defvar-local forj-review--show-help nil
  "Non-nil while the list of keys shows at the top of the review.")

(defvar-local forj-review--timer nil
  "The timer that closes an unanswered review, or nil.")

(defvar-local forj-review--deadline nil
  "When an unanswered review closes by itself (a `float-time'), or nil.")

(defvar-local forj-review--quiet-since 0
  "When the review appeared, or ignored a key: decision keys wait from then.")

(defvar forj-review--last-key-elsewhere 0
  "When the last command ran in a buffer other than a review.")

(defvar forj-review-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map "a" #'forj-review-approve)
    (define-key map "d" #'forj-review-deny)
    (define-key map "r" #'forj-review-deny-with-reason)
    (define-key map "e" #'forj-review-edit)
    (define-key map "+" #'forj-review-approve-hunk)
    (define-key map "-" #'forj-review-drop-hunk)
    (define-key map "_" #'forj-review-drop-hunk-with-reason)
    (define-key map (kbd "M-n") #'forj-review-next-hunk)
    (define-key map (kbd "M-p") #'forj-review-previous-hunk)
    (define-key map "A" #'forj-review-approve-all)
    (define-key map "D" #'forj-review-deny-all)
    (define-key map "n" #'forj-review-next)
    (define-key map "p" #'forj-review-previous)
    (define-key map (kbd "C-c C-c") #'forj-review-commit)
    (define-key map "q" #'forj-review-quit)
    (define-key map (kbd "C-g") #'forj-review-cancel)
    (define-key map "s" #'forj-review-grant-session)
    (define-key map "m" #'forj-review-grant-minutes)
    (define-key map "!" #'forj-review-grant-project)
    (define-key map "?" #'forj-review-help)
    map)
  "Keymap of `forj-review-mode'.")

(define-derived-mode forj-review-mode special-mode "forj-review"
  "Review the tool calls of a batch before anything runs.

\\{forj-review-mode-map}"
  ;; Long lines wrap: the tail of a padded command must be on screen.
  (setq-local truncate-lines nil)
  (setq-local truncate-partial-width-windows nil)
  (setq-local word-wrap nil)
  ;; Characters show in the order they run: right-to-left letters in a
  ;; command must not reorder its words on screen, nor turn a paragraph of
  ;; forj's own lines right to left.
  (setq-local bidi-paragraph-direction 'left-to-right)
  (setq-local bidi-display-reordering nil)
  (setq-local forj-review--quiet-since (float-time))
  (add-hook 'pre-command-hook #'forj-review--note-key-here nil t)
  (add-hook 'kill-buffer-hook #'forj-review--deny-on-kill nil t))

(defun forj-review-open (items callback &optional proposal-function options)
  "Show ITEMS (plan items needing confirmation) for review.
CALLBACK is called once, when the decisions are committed, with the
list of approved ids, an alist of denied ids and reasons, an alist
of ids the user edited before approving, each with an alist of paths
and texts, whether the batch was cancelled, and an alist of approved
ids with the standing grant given (see `forj-review--grants'), and an
alist of ids approved in part with their hunks (see
`forj-review--hunks-field').
PROPOSAL-FUNCTION, if given, fetches a call's proposal for editing
\(see `forj-review--proposal-function').  OPTIONS is a plist: :timeout,
seconds after which an unanswered review closes with every call denied
\(nil or 0: it waits), and :mode-note, a sentence saying the chat's mode
was not honoured.  Return the review buffer."
  (let ((buffer (generate-new-buffer "*forj-review*"))
        (configuration (current-window-configuration))
        (frame (selected-frame)))
    (with-current-buffer buffer
      (forj-review-mode)
      (setq forj-review--items items
            forj-review--decisions (make-hash-table :test #'equal)
            forj-review--modified (make-hash-table :test #'equal)
            forj-review--user-diffs (make-hash-table :test #'equal)
            forj-review--drawn-previews (make-hash-table :test #'equal)
            forj-review--proposal-function proposal-function
            forj-review--grants (make-hash-table :test #'equal)
            forj-review--hunks (make-hash-table :test #'equal)
            forj-review--whole-only (make-hash-table :test #'equal)
            forj-review--options options
            forj-review-callback callback)
      (forj-review--start-timer (plist-get options :timeout))
      (forj-review--render)
      (goto-char (point-min))
      (forj-review-next))
    (add-hook 'pre-command-hook #'forj-review--note-key-elsewhere)
    (pop-to-buffer buffer forj-display-review)
    (with-current-buffer buffer
      (setq forj-review-windows (list configuration frame (window-list frame 'nomini)))
      (setq forj-review--quiet-since (float-time)))
    buffer))

(defun forj-review--put-windows-back ()
  "Put the windows back as they were before this review opened.
Only when the frame still has the windows it had once the review
showed, the review among them; otherwise the review's own window is
quit, and the rest of the user's layout is left alone."
  (pcase-let ((`(,configuration ,frame ,windows) forj-review-windows)
              (buffer (current-buffer)))
    (setq forj-review-windows nil)
    (cond
     ((and configuration (frame-live-p frame)
           (equal (window-list frame 'nomini) windows)
           (get-buffer-window buffer frame))
      (let ((selected (selected-frame)))
        (save-current-buffer (set-window-configuration configuration))
        ;; Putting back windows of another frame does not move the user there.
        (when (and (frame-live-p selected) (not (eq selected frame)))
          (select-frame selected))))
     ((get-buffer-window buffer t)
      (quit-window nil (get-buffer-window buffer t))))))

;;; Keys typed elsewhere do not decide here

(defconst forj-review--guarded-commands
  '(forj-review-approve forj-review-deny forj-review-deny-with-reason forj-review-edit
    forj-review-approve-all forj-review-deny-all forj-review-commit forj-review-quit
    forj-review-cancel forj-review-grant-session forj-review-grant-minutes
    forj-review-grant-project forj-review-approve-hunk forj-review-drop-hunk
    forj-review-drop-hunk-with-reason)
  "The commands that decide; they act only when the review is ready for keys.")

(defconst forj-review--navigation-commands
  '(forj-review-next forj-review-previous forj-review-next-hunk forj-review-previous-hunk
    forj-review-help next-line previous-line forward-char backward-char
    left-char right-char beginning-of-buffer end-of-buffer move-beginning-of-line
    move-end-of-line beginning-of-visual-line end-of-visual-line scroll-other-window
    scroll-other-window-down recenter-top-bottom mouse-set-point mouse-drag-region mwheel-scroll
    handle-switch-frame handle-select-window execute-extended-command ignore)
  "Commands that only move around: they neither wait nor make decision keys wait.")

(defun forj-review--note-key-elsewhere ()
  "Remember when a command ran outside a review, or forget this hook."
  (cond ((or (derived-mode-p 'forj-review-mode) (minibufferp)))
        ((not (cl-some (lambda (buffer)
                         (eq (buffer-local-value 'major-mode buffer) 'forj-review-mode))
                       (buffer-list)))
         (remove-hook 'pre-command-hook #'forj-review--note-key-elsewhere))
        (t (setq forj-review--last-key-elsewhere (float-time)))))

(defun forj-review--note-key-here ()
  "Make decision keys wait after a key here that is neither a decision nor a move.
Someone typing a sentence meant for another buffer is not reading this."
  (unless (or (memq this-command forj-review--guarded-commands)
              (memq this-command forj-review--navigation-commands))
    (setq forj-review--quiet-since (float-time))))

(defun forj-review--ready ()
  "Signal a `user-error' unless the decision keys of this review may act now.
They act when the review window is selected and
`forj-review-input-delay' seconds have passed since the review
appeared, since the last key typed in another buffer and since the
last key this review ignored.  An ignored key restarts the delay.
Return nil, the argument list of the commands that call it."
  (let ((window (selected-window))
        (now (float-time)))
    (cond
     ((not (eq (window-buffer window) (current-buffer)))
      (setq forj-review--quiet-since now)
      (user-error "Key ignored: select the review window first, then decide"))
     ((< now (+ (max forj-review--quiet-since forj-review--last-key-elsewhere)
                forj-review-input-delay))
      (setq forj-review--quiet-since now)
      (user-error "Key ignored: the review just appeared or you were typing; read it, then press again"))
     (t nil))))

;;; Drawing

(defconst forj-review--header-width 18
  "Columns before a call's summary: its state and its risk.")

(defun forj-review--wrap (text prefix)
  "TEXT whose wrapped continuation lines start with PREFIX and a wrap mark."
  (propertize text 'wrap-prefix
              (concat prefix (propertize "↪ " 'face 'forj-review-gutter))))

(defun forj-review--one-line (text)
  "TEXT as drawn in the review on one line: each line break is a ⏎ marker."
  (mapconcat #'identity
             (forj-review--collapse-blank-lines
              (mapcar #'forj-review-visible-text (split-string text "\n"))
              "[ \t]*\\(│\\)?")
             (forj-review--marker "⏎")))

(defun forj-review--own-line (text &optional face)
  "One line of forj's own, TEXT (marked as shown) in FACE, wrapping under itself."
  (let ((line (forj-review--one-line text)))
    (when face (add-face-text-property 0 (length line) face t line))
    (concat (forj-review--wrap line "    ") "\n")))

(defun forj-review--render ()
  "Draw the review buffer from its items and decisions."
  (let ((inhibit-read-only t)
        (line (line-number-at-pos)))
    (erase-buffer)
    (insert (substitute-command-keys
             "Review these tool calls.  \\<forj-review-mode-map>\\[forj-review-approve] approve, \\[forj-review-deny] deny, \\[forj-review-deny-with-reason] deny with a reason, \\[forj-review-edit] edit then approve, \\[forj-review-approve-hunk] / \\[forj-review-drop-hunk] approve / drop the hunk, \\[forj-review-approve-all] / \\[forj-review-deny-all] all, \\[forj-review-commit] commit, \\[forj-review-quit] deny all; \\[forj-review-grant-session] / \\[forj-review-grant-minutes] / \\[forj-review-grant-project] approve and grant, \\[forj-review-help] all keys.\n\n"))
    (forj-review--insert-preamble)
    (dolist (item forj-review--items)
      (let* ((id (plist-get item :id))
             (decision (gethash id forj-review--decisions))
             (risk (or (plist-get item :risk) "low"))
             (start (point)))
        (dolist (warning (append (plist-get item :warnings) nil))
          (insert (forj-review--own-line (concat "⚠ " warning) 'forj-review-warning)))
        (insert (forj-review--wrap
                 (concat
                  (cond ((and (eq decision t) (gethash id forj-review--hunks))
                         (propertize "[in part] " 'face 'forj-review-approved))
                        ((and (eq decision t) (gethash id forj-review--modified))
                         (propertize "[edited]  " 'face 'forj-review-approved))
                        ((and (eq decision t) (gethash id forj-review--grants))
                         (propertize "[granted] " 'face 'forj-review-approved))
                        ((eq decision t) (propertize "[approved]" 'face 'forj-review-approved))
                        (decision (propertize "[denied]  " 'face 'forj-review-denied))
                        (t "[        ]"))
                  " "
                  (propertize (format "%-6s" (forj-review-visible-text risk))
                              'face (if (equal risk "high") 'forj-review-high-risk 'bold))
                  " "
                  (forj-review--one-line (or (plist-get item :summary) "")))
                 (make-string forj-review--header-width ?\s))
                "\n")
        (when (and (consp decision) (cdr decision))
          (insert (forj-review--own-line (concat "    reason: " (cdr decision)))))
        (when (and (eq decision t) (gethash id forj-review--modified))
          (insert (forj-review--own-line
                   (concat "    you edited: "
                           (mapconcat #'car (gethash id forj-review--modified) ", ")
                           (if (rassq 'pending (gethash id forj-review--user-diffs))
                               " (computing the diff of your text; it is what will be written)"
                             " (the diff below is of your text: it is what will be written)")))))
        (when (and (eq decision t) (gethash id forj-review--hunks))
          (insert (forj-review--own-line (forj-review--in-part-summary id))))
        (forj-review--insert-consent item decision)
        (when (plist-get item :preview_note)
          (insert (forj-review--own-line (concat "    " (plist-get item :preview_note)))))
        (when (plist-get item :preview)
          (let ((from (point)))
            (insert (or (gethash id forj-review--drawn-previews)
                        (puthash id (forj-review--preview
                                     (forj-review--with-user-diffs
                                      (plist-get item :preview)
                                      (gethash id forj-review--user-diffs)))
                                 forj-review--drawn-previews)))
            (forj-review--mark-hunks item decision from (point))))
        (insert "\n")
        (put-text-property start (point) 'forj-review-id id)))
    (forj-review--header-warning)
    (goto-char (point-min))
    (forward-line (1- line))))

(defun forj-review--insert-preamble ()
  "Insert the list of keys if asked for, the mode note and the timeout."
  (when forj-review--show-help
    (insert (forj-review--help-text) "\n"))
  (let ((note (plist-get forj-review--options :mode-note)))
    (when (and (stringp note) (not (string-empty-p note)))
      (insert (forj-review--own-line (concat "⚠ " note) 'forj-review-warning))))
  (when forj-review--deadline
    (insert (forj-review--own-line
             (format "Unanswered, this review closes at %s (after %s s) with every call denied."
                     (format-time-string "%H:%M:%S" forj-review--deadline)
                     (forj-review--seconds (plist-get forj-review--options :timeout)))
             'forj-review-warning)))
  (when (or (plist-get forj-review--options :mode-note) forj-review--deadline)
    (insert "\n")))

(defun forj-review--seconds (seconds)
  "SECONDS as text, without a fraction when it has none."
  (if (and (numberp seconds) (= seconds (truncate seconds)))
      (format "%d" (truncate seconds))
    (format "%s" seconds)))

(defun forj-review--grant-description (grant)
  "GRANT (see `forj-review--grants') in words."
  (format "%s, rule %s"
          (pcase (plist-get grant :scope)
            ("session" "for this chat")
            ("minutes" (format "for %s minutes in this chat"
                               (forj-review--seconds (plist-get grant :minutes))))
            ("project" "always, in every chat of this project")
            (scope scope))
          (plist-get grant :pattern)))

(defun forj-review--insert-consent (item decision)
  "Insert why ITEM is reviewed, and what a grant of it would cover.
DECISION is the user's decision on it so far."
  (let* ((id (plist-get item :id))
         (grant (gethash id forj-review--grants))
         (reason (plist-get item :reason))
         (pattern (plist-get item :grant_pattern)))
    (when (stringp reason)
      (insert (forj-review--own-line (concat "    why: " reason) 'shadow)))
    (cond
     (grant
      (insert (forj-review--own-line (concat "    grant: " (forj-review--grant-description grant))
                                     'forj-review-approved)))
     ((and (stringp pattern) (not (consp decision)))
      (insert (forj-review--own-line
               ;; The rule is the worker's text, from the model's call: no
               ;; key substitution runs over it.
               (concat "    a grant would cover: " pattern
                       (substitute-command-keys
                        "  (\\<forj-review-mode-map>\\[forj-review-grant-session] this chat, \\[forj-review-grant-minutes] minutes, \\[forj-review-grant-project] always; you can edit the rule first)"))
               'shadow))))))

(defun forj-review--help-text ()
  "The list of the review's keys, for `forj-review-help'."
  (let ((lines
         (substitute-command-keys
          (concat
           "\\<forj-review-mode-map>Keys of the review (\\[forj-review-help] hides this list):\n"
           "  \\[forj-review-approve]  approve the call at point, this once\n"
           "  \\[forj-review-grant-session]  approve, and grant the rule for this chat (until the worker stops)\n"
           "  \\[forj-review-grant-minutes]  approve, and grant the rule for this chat for N minutes\n"
           "  \\[forj-review-grant-project]  approve, and grant the rule always, in every chat of this project\n"
           "     (the grant keys propose the narrowest rule that covers the call; edit it\n"
           "     in the minibuffer; M-x forj-permissions lists and revokes grants)\n"
           "  \\[forj-review-deny]  deny the call at point\n"
           "  \\[forj-review-deny-with-reason]  deny it with a reason the model reads\n"
           "  \\[forj-review-edit]  edit the proposed change in ediff, then approve it\n"
           "  \\[forj-review-approve-hunk] / \\[forj-review-drop-hunk]  approve / drop the hunk at point (the call is approved in part)\n"
           "  \\[forj-review-drop-hunk-with-reason]  drop the hunk at point with a reason the model reads\n"
           "  \\[forj-review-next-hunk] / \\[forj-review-previous-hunk]  next / previous hunk\n"
           "  \\[forj-review-approve-all] / \\[forj-review-deny-all]  approve / deny every call\n"
           "  \\[forj-review-next] / \\[forj-review-previous]  next / previous call\n"
           "  \\[forj-review-commit]  commit the decisions (undecided calls are denied)\n"
           "  \\[forj-review-quit]  deny every call and commit\n"
           "  \\[forj-review-cancel]  cancel the batch: nothing runs, and the chat does not go on\n"
           "A grant never lifts a deny or ask rule, a requires_consent rule, or a review\n"
           "forced by network access or a missing sandbox: such calls offer no rule.\n"))))
    (mapconcat (lambda (line) (concat (forj-review--wrap line "    ") "\n"))
               (split-string lines "\n" t) "")))

(defun forj-review-help ()
  "Show or hide the list of the review's keys, grant keys included."
  (interactive)
  (setq forj-review--show-help (not forj-review--show-help))
  (forj-review--render)
  (when forj-review--show-help (goto-char (point-min))))

(defun forj-review--header-warning ()
  "Warn at the top about any ⟨U+XXXX⟩ marker in the review."
  (let ((count (how-many "⟨U\\+[0-9A-F]\\{4,6\\}⟩" (point-min) (point-max))))
    (when (> count 0)
      (goto-char (point-min))
      (insert (forj-review--own-line
               (format "⚠ This review shows %d invisible or format character%s as ⟨U+XXXX⟩: the text holds them where the markers are."
                       count (if (= count 1) "" "s"))
               'forj-review-warning)
              "\n"))))

(defconst forj-review--gutter
  (propertize "  ┃ " 'face 'forj-review-gutter)
  "What each line of a preview is shown behind.
A display property, not text: nothing a preview holds can draw it, so
a preview cannot pass for forj's own lines.")

(defconst forj-review--wrap-gutter
  (concat forj-review--gutter (propertize "↪ " 'face 'forj-review-gutter))
  "What a wrapped continuation of a preview line is shown behind.")

(defun forj-review--diff-face (line)
  "The `diff-mode' face of LINE of a unified diff."
  (cond ((string-prefix-p "+++" line) 'diff-file-header)
        ((string-prefix-p "---" line) 'diff-file-header)
        ((string-prefix-p "@@" line) 'diff-hunk-header)
        ((string-prefix-p "+" line) 'diff-added)
        ((string-prefix-p "-" line) 'diff-removed)
        (t 'diff-context)))

(defun forj-review--preview (text)
  "TEXT, a call's preview, as drawn in the review.
Each line is kept as it is (no indentation added or removed), behind
the gutter; a unified diff is coloured with `diff-mode' faces.  Runs
of more than two blank lines show as one counted line, invisible
characters and wide runs of blanks as markers.  Each line of a diff's
hunk carries the `forj-review-hunk' property, (PATH . INDEX), from
`forj-review--scan-diff'."
  (let* ((diff (string-match-p "\\`\\(?:--- \\|@@\\)" text))
         (raw (forj-review--lines text))
         (shown (forj-review--lines (forj-review-visible-text text)))
         (scan (and diff (forj-review--scan-diff raw))))
    ;; Hunks are found in the text as the worker sent it (markers change
    ;; no line), and the tag rides on each line's first character through
    ;; the collapsing of blank runs, which keeps a run's prefix.
    (when (and scan (not (plist-get scan :malformed)) (= (length raw) (length shown)))
      (cl-loop for line in shown
               for (_ . hunk) in (plist-get scan :lines)
               when (and hunk (> (length line) 0))
               do (put-text-property 0 (length line) 'forj-review-hunk hunk line)))
    (let ((lines (forj-review--collapse-blank-lines
                  shown
                  ;; A diff line's first column, or a quoted block's line mark
                  ;; (the worker writes an empty line of a quoted text as
                  ;; "│ ⟨blank⟩", a line of only blanks as "│ ⟨N blanks⟩").
                  (if diff "\\([-+ ]\\)"
                    "[ \t]*\\(?:\\(│\\)[ \t]*\\(?:⟨blank⟩\\|⟨[0-9]+ blanks⟩\\)?\\)?"))))
      (with-temp-buffer
        (dolist (line lines)
          (let ((start (point))
                (hunk (and (> (length line) 0) (get-text-property 0 'forj-review-hunk line))))
            (insert line "\n")
            (when diff
              (put-text-property start (point) 'forj-review-hunk hunk)
              (if (text-property-not-all 0 (length line) 'face nil line)
                  ;; Behind the markers' own face.
                  (add-face-text-property start (point) (forj-review--diff-face line) t)
                (put-text-property start (point) 'face (forj-review--diff-face line))))))
        (put-text-property (point-min) (point-max) 'line-prefix forj-review--gutter)
        (put-text-property (point-min) (point-max) 'wrap-prefix forj-review--wrap-gutter)
        (buffer-string)))))

(defconst forj-review--hunk-header-re
  "\\`@@ -[0-9]+\\(?:,\\([0-9]+\\)\\)? \\+[0-9]+\\(?:,\\([0-9]+\\)\\)? @@"
  "A hunk's header line; groups 1 and 2 its old and new line counts.")

(defun forj-review--scan-diff (lines)
  "Where each of LINES, a unified diff's, belongs: a plist.
:lines is a list with one (PIECE . HUNK) per line: PIECE is the path
of the file whose piece of the diff this line starts (its \"--- \"
line, followed by a \"+++ \" line), else nil; HUNK is the (PATH .
INDEX) of the hunk the line is in, one object for all its lines, else
nil.  INDEX counts the \"@@\" hunks of PATH's piece from 0, as the
worker does.  A hunk ends after as many lines as its header counts,
so a removed line \"-- x\" above an added \"++ y\" (drawn \"--- x\",
\"+++ y\") stays in its hunk: only a \"--- \" line outside every hunk
starts a piece.  :malformed is non-nil if a hunk held a line no diff
has: then no line can be trusted to be where it seems."
  (let ((path nil) (index -1) (hunk nil) (old 0) (new 0)
        (out nil) (malformed nil) (rest lines))
    (while rest
      (let ((line (car rest)) (piece nil) (tag nil))
        (cond
         ((or (> old 0) (> new 0))
          (setq tag hunk)
          (cond ((string-prefix-p "\\" line))
                ((string-prefix-p " " line) (setq old (1- old) new (1- new)))
                ((string-prefix-p "-" line) (setq old (1- old)))
                ((string-prefix-p "+" line) (setq new (1- new)))
                (t (setq malformed t old 0 new 0 tag nil))))
         ;; "\ No newline at end of file" after a hunk's last line.
         ((and (string-prefix-p "\\" line) out (cdar out))
          (setq tag (cdar out)))
         ((and (string-prefix-p "--- " line) (cdr rest) (string-prefix-p "+++ " (cadr rest)))
          (setq piece (string-remove-prefix "b/" (substring-no-properties (cadr rest) 4))
                path piece index -1 hunk nil)
          (push (cons piece nil) out)
          (setq piece nil rest (cdr rest) line (car rest)))
         ((string-match forj-review--hunk-header-re line)
          (when path
            (setq index (1+ index)
                  hunk (cons path index)
                  tag hunk
                  old (if (match-beginning 1) (string-to-number (match-string 1 line)) 1)
                  new (if (match-beginning 2) (string-to-number (match-string 2 line)) 1)))))
        (push (cons piece tag) out)
        (setq rest (cdr rest))))
    (list :lines (nreverse out) :malformed malformed)))

(defun forj-review--file-diffs (preview)
  "PREVIEW, a unified diff of one or more files, cut into (PATH . TEXT) pieces.
A piece starts at a \"--- \" line outside every hunk followed by a
\"+++ \" line, whose path (without its b/) names it (see
`forj-review--scan-diff'); text before the first piece has a nil
path."
  (let* ((lines (forj-review--lines preview))
         (scan (plist-get (forj-review--scan-diff lines) :lines))
         (pieces nil)
         (at 0))
    (cl-loop for line in lines
             for (piece . _) in scan
             do (progn
                  (when (or piece (null pieces))
                    (push (list (and piece (substring-no-properties piece)) at) pieces))
                  (setq at (min (length preview) (+ at (length line) 1)))))
    (setq pieces (nreverse pieces))
    (if (null pieces)
        (list (cons nil preview))
      (cl-loop for ((path from) . rest) on pieces
               for to = (if rest (nth 1 (car rest)) (length preview))
               unless (and (null path) (= from to))
               collect (cons path (substring preview from to))))))

(defun forj-review--with-user-diffs (preview user-diffs)
  "PREVIEW with the piece of each file in USER-DIFFS replaced by the user's diff.
USER-DIFFS is an alist of (PATH . DIFF); a DIFF still `pending' leaves
the proposal's piece, and a file the preview does not show is added."
  (if (null user-diffs)
      preview
    (let* ((pieces (forj-review--file-diffs preview))
           (done nil)
           (out (mapcar (lambda (piece)
                          (let ((mine (assoc (car piece) user-diffs)))
                            (if (and mine (stringp (cdr mine)))
                                (progn (push (car piece) done) (cdr mine))
                              (cdr piece))))
                        pieces)))
      (apply #'concat
             (append out
                     (cl-loop for (path . diff) in user-diffs
                              when (and (stringp diff) (not (member path done)))
                              collect diff))))))

(defun forj-review--id-at-point ()
  "The id of the call at point, or signal."
  (or (get-text-property (point) 'forj-review-id)
      (user-error "No tool call at point")))

(defun forj-review-decide (id decision)
  "Record DECISION (t, or (deny . REASON)) for call ID, and redraw.
A denial takes back a grant given with an earlier approval."
  (puthash id decision forj-review--decisions)
  (unless (eq decision t)
    (remhash id forj-review--grants)
    (remhash id forj-review--hunks))
  (forj-review--render))

(defun forj-review--item (id)
  "The plan item of call ID."
  (cl-find id forj-review--items :key (lambda (item) (plist-get item :id)) :test #'equal))

(defun forj-review-grant (id scope pattern &optional minutes)
  "Approve call ID, granting PATTERN for SCOPE to what it covers.
SCOPE is \"session\" (this chat, while the worker runs), \"minutes\"
\(this chat, for MINUTES) or \"project\" (every chat of the project,
until revoked).  The worker checks that PATTERN covers the call.
A call approved in part gets no grant: a grant lets later calls like
it run whole, unreviewed."
  (when (gethash id forj-review--hunks)
    (user-error "This call is approved in part; a grant covers whole calls: approve it whole first (%s)"
                (substitute-command-keys "\\<forj-review-mode-map>\\[forj-review-approve]")))
  (puthash id (append (list :scope scope :pattern pattern)
                      (and minutes (list :minutes minutes)))
           forj-review--grants)
  (forj-review-decide id t))

(defun forj-review--proposed-rule ()
  "The rule the worker proposes for a grant of the call at point.
Signal a `user-error' saying why when there is none."
  (let* ((item (forj-review--item (forj-review--id-at-point)))
         (proposed (plist-get item :grant_pattern)))
    (unless (and (stringp proposed) (not (string-empty-p proposed)))
      (user-error "No grant can lift this review (%s); approve it once with %s"
                  (or (plist-get item :reason) "the worker offers no rule for it")
                  (substitute-command-keys "\\<forj-review-mode-map>\\[forj-review-approve]")))
    proposed))

(defun forj-review--read-grant (scope what &optional minutes)
  "Ask for the rule of a SCOPE grant of the call at point; WHAT: for how long.
MINUTES goes with a timed grant.  The worker's proposed rule is the
initial input."
  (let ((id (forj-review--id-at-point))
        (proposed (forj-review--proposed-rule)))
    (let ((pattern (string-trim (read-string (format "Approve and grant %s the rule: " what)
                                             proposed))))
      (when (string-empty-p pattern)
        (user-error "No rule given; nothing was granted"))
      (forj-review-grant id scope pattern minutes))))

(defun forj-review-grant-session ()
  "Approve the call at point; let what its rule covers run in this chat.
The rule (the worker proposes the narrowest one) can be edited first.
The grant lasts as long as the worker runs."
  (interactive (forj-review--ready))
  (forj-review--read-grant "session" "for this chat"))

(defun forj-review-grant-minutes (minutes)
  "Approve the call at point; let what its rule covers run for MINUTES.
In this chat only; the rule can be edited first."
  (interactive (progn (forj-review--ready)
                      (forj-review--proposed-rule)
                      (list (read-number "Approve and grant for how many minutes? " 30))))
  (unless (and (numberp minutes) (> minutes 0) (<= minutes (* 7 24 60)))
    (user-error "Give a number of minutes above 0 and at most a week (10080)"))
  (forj-review--read-grant "minutes" (format "for %s minutes" (forj-review--seconds minutes)) minutes))

(defun forj-review-grant-project ()
  "Approve the call at point; let what its rule covers run always.
In every chat of this project, until revoked with `forj-permissions'.
The grant is kept in your state directory, never in the project; the
rule can be edited first."
  (interactive (forj-review--ready))
  (forj-review--read-grant "project" "always, for this project,"))

(defun forj-review-modify (id path text)
  "Approve call ID with TEXT written to PATH instead of its proposal."
  (let ((edits (assoc-delete-all path (copy-alist (gethash id forj-review--modified)))))
    (puthash id (append edits (list (cons path text))) forj-review--modified))
  ;; The edited file is written as edited, whole: its hunk decisions go.
  (let ((states (cl-remove-if (lambda (entry) (equal (caar entry) path))
                              (gethash id forj-review--hunks))))
    (if (cl-some (lambda (entry) (consp (cdr entry))) states)
        (puthash id states forj-review--hunks)
      (remhash id forj-review--hunks)))
  (forj-review-decide id t))

(defun forj-review-approve ()
  "Approve the call at point, this once."
  (interactive (forj-review--ready))
  (let ((id (forj-review--id-at-point)))
    (remhash id forj-review--grants)
    (remhash id forj-review--hunks)
    (forj-review-decide id t)))

(defun forj-review-deny ()
  "Deny the call at point."
  (interactive (forj-review--ready))
  (forj-review-decide (forj-review--id-at-point) (cons 'deny nil)))

(defun forj-review-deny-with-reason (reason)
  "Deny the call at point and tell the model REASON."
  (interactive (progn (forj-review--ready) (list (read-string "Why deny this call? "))))
  (forj-review-decide (forj-review--id-at-point)
                      (cons 'deny (and (not (string-empty-p reason)) reason))))

(defun forj-review-approve-all ()
  "Approve every call."
  (interactive (forj-review--ready))
  (dolist (item forj-review--items) (puthash (plist-get item :id) t forj-review--decisions))
  (clrhash forj-review--hunks)
  (forj-review--render))

(defun forj-review-deny-all ()
  "Deny every call."
  (interactive (forj-review--ready))
  (dolist (item forj-review--items)
    (puthash (plist-get item :id) (cons 'deny nil) forj-review--decisions))
  (clrhash forj-review--grants)
  (clrhash forj-review--hunks)
  (forj-review--render))

(defun forj-review-next ()
  "Move to the next call."
  (interactive)
  (let ((here (get-text-property (point) 'forj-review-id))
        (pos (point)))
    (while (and pos (equal (get-text-property pos 'forj-review-id) here))
      (setq pos (next-single-property-change pos 'forj-review-id)))
    (when (and pos (not (get-text-property pos 'forj-review-id)))
      (setq pos (next-single-property-change pos 'forj-review-id)))
    (when pos (goto-char pos))))

(defun forj-review-previous ()
  "Move to the previous call."
  (interactive)
  (let ((pos (previous-single-property-change (point) 'forj-review-id)))
    (when pos
      (goto-char pos)
      (unless (get-text-property (point) 'forj-review-id)
        (let ((start (previous-single-property-change (point) 'forj-review-id)))
          (when start (goto-char start)))))))

(defun forj-review-commit ()
  "Hand the decisions to the batch, denying what is undecided."
  (interactive (forj-review--ready))
  (let ((callback forj-review-callback)
        (approved nil)
        (denied nil))
    (dolist (item forj-review--items)
      (let* ((id (plist-get item :id))
             (decision (gethash id forj-review--decisions)))
        (if (eq decision t)
            (push id approved)
          (push (cons id (or (cdr-safe decision) "")) denied))))
    (let ((modified (cl-loop for id in approved
                             when (gethash id forj-review--modified)
                             collect (cons id (gethash id forj-review--modified))))
          (grants (cl-loop for id in (reverse approved)
                           when (gethash id forj-review--grants)
                           collect (cons id (gethash id forj-review--grants))))
          (hunks (cl-loop for id in (reverse approved)
                          when (gethash id forj-review--hunks)
                          collect (cons id (forj-review--hunks-field id)))))
      (setq forj-review-callback nil)
      (let ((buffer (current-buffer)))
        (forj-review--put-windows-back)
        (kill-buffer buffer))
      ;; Only a review that offered hunks passes them: older callbacks take five.
      (when callback
        (apply callback (nreverse approved) (nreverse denied) modified nil grants
               (and hunks (list hunks)))))))

(defun forj-review--start-timer (seconds)
  "Close this review after SECONDS unanswered, every call denied; nil: wait."
  (when (and (numberp seconds) (> seconds 0))
    (let ((buffer (current-buffer)))
      (setq forj-review--deadline (+ (float-time) seconds)
            forj-review--timer (run-at-time seconds nil #'forj-review--time-out buffer)))))

(defun forj-review--time-out (buffer)
  "The review BUFFER went unanswered too long: deny everything, commit, say so."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (when forj-review-callback
        (let ((seconds (forj-review--seconds (plist-get forj-review--options :timeout))))
          (forj-review-deny-all)
          (forj-review-commit)
          (message "forj: the review went unanswered for %s s; every call in it was denied" seconds))))))

(defun forj-review-quit ()
  "Deny every call and commit."
  (interactive (forj-review--ready))
  (forj-review-deny-all)
  (forj-review-commit))

(defun forj-review-cancel ()
  "Cancel the whole batch: nothing is run, and a chat is not resumed."
  (interactive (forj-review--ready))
  (let ((callback forj-review-callback)
        (ids (mapcar (lambda (item) (cons (plist-get item :id) "")) forj-review--items)))
    (setq forj-review-callback nil)
    (let ((buffer (current-buffer)))
      (forj-review--put-windows-back)
      (kill-buffer buffer))
    (when callback (funcall callback nil ids nil t))))

(defun forj-review--deny-on-kill ()
  "Leaving the buffer without committing denies everything."
  (when (timerp forj-review--timer)
    (cancel-timer forj-review--timer)
    (setq forj-review--timer nil))
  (when forj-review-windows
    (forj-review--put-windows-back))
  (when forj-review-callback
    (let ((callback forj-review-callback))
      (setq forj-review-callback nil)
      (funcall callback nil (mapcar (lambda (item) (cons (plist-get item :id) ""))
                                    forj-review--items)
               nil))))

;;; Approving in part, hunk by hunk

(defun forj-review--hunk-files (id)
  "The files of call ID whose hunks can be decided one by one.
An alist of (PATH . COUNT), COUNT the number of its hunks.
The worker lists them in the plan item; a file the user edited in
ediff is decided whole, as edited."
  (let ((edited (gethash id forj-review--modified)))
    (cl-loop for file across (if (gethash id forj-review--whole-only)
                                 []
                               (or (plist-get (forj-review--item id) :hunk_files) []))
             for path = (plist-get file :path)
             unless (assoc path edited)
             collect (cons path (plist-get file :hunks)))))

(defun forj-review--hunk-count (id)
  "The number of hunks of call ID that can be decided, across its files."
  (apply #'+ (mapcar #'cdr (forj-review--hunk-files id))))

(defun forj-review--hunk-state (id hunk decision)
  "The state of HUNK, (PATH . INDEX), of call ID decided DECISION.
`approved', (dropped . REASON), or nil while the call is undecided."
  (let ((states (gethash id forj-review--hunks)))
    (cond (states (cdr (assoc hunk states)))
          ((eq decision t) 'approved)
          (decision (cons 'dropped nil)))))

(defun forj-review--mark-hunks (item decision from to)
  "Show the state of each hunk of ITEM's preview between FROM and TO.
DECISION is the call's.  Each hunk of a file that can be decided hunk
by hunk gets a line of its own before it: [+] approved, [-] dropped
\(with the reason) or [ ] undecided, and a dropped hunk's lines the
face `forj-review-dropped-hunk'.  Nothing is added to a call with a
single hunk and no hunk decision: there the call keys say it all."
  (forj-review--check-hunks (plist-get item :id) from to)
  (let* ((id (plist-get item :id))
         (files (forj-review--hunk-files id)))
    (when (and files (or (> (forj-review--hunk-count id) 1) (gethash id forj-review--hunks)))
      (save-excursion
        (let ((pos from) (end (copy-marker to)))
          (while (< pos end)
            (let* ((hunk (get-text-property pos 'forj-review-hunk))
                   (next (or (next-single-property-change pos 'forj-review-hunk nil end) end))
                   (file (and hunk (assoc (car hunk) files))))
              (when (and file (< (cdr hunk) (cdr file)))
                (let ((state (forj-review--hunk-state id hunk decision)))
                  (when (eq (car-safe state) 'dropped)
                    (add-face-text-property pos next 'forj-review-dropped-hunk t))
                  (goto-char pos)
                  (let ((line (forj-review--hunk-line hunk (cdr file) state)))
                    (insert line)
                    (put-text-property pos (+ pos (length line)) 'forj-review-hunk hunk)
                    (setq next (+ next (length line))))))
              (setq pos next)))
          (set-marker end nil))))))

(defun forj-review--check-hunks (id from to)
  "Let call ID be decided only whole if its diff is not as the worker counts.
The diff, drawn between FROM and TO, must show exactly the hunks of
the call's `:hunk_files': each file in order, each of its hunks once,
in order, and no other.  A key
on a hunk names it by file and index; a drawing that found other
hunks (a diff this review cannot read, a header imitated by the text)
would name lines the user did not mean."
  (let* ((edited (gethash id forj-review--modified))
         (expected (cl-loop for file across (or (plist-get (forj-review--item id) :hunk_files) [])
                           for path = (plist-get file :path)
                           unless (assoc path edited)
                           append (cl-loop for index below (plist-get file :hunks)
                                           collect (cons path index))))
         (seen nil)
         (pos from))
    (while (< pos to)
      (let ((hunk (get-text-property pos 'forj-review-hunk)))
        (when (and hunk (not (assoc (car hunk) edited)))
          (push hunk seen))
        (setq pos (next-single-property-change pos 'forj-review-hunk nil to))))
    (unless (equal (nreverse seen) expected)
      (puthash id t forj-review--whole-only))))

(defun forj-review--hunk-line (hunk count state)
  "The line drawn before HUNK, (PATH . INDEX), in STATE; its file has COUNT hunks."
  (let ((where (format "hunk %d of %d in %s" (1+ (cdr hunk)) count (car hunk))))
    (forj-review--own-line
     (pcase state
       ('approved (propertize (concat "[+] " where ": approved") 'face 'forj-review-approved))
       (`(dropped . ,reason)
        (propertize (concat "[-] " where ": dropped"
                            (if (and reason (not (string-empty-p reason))) (concat "; reason: " reason) ""))
                    'face 'forj-review-denied))
       (_ (concat "[ ] " where))))))

(defun forj-review--in-part-summary (id)
  "A line saying which hunks of call ID are written and which are not."
  (let* ((states (gethash id forj-review--hunks))
         (dropped (cl-loop for (hunk . state) in states
                           when (consp state)
                           collect (format "%d of %s" (1+ (cdr hunk)) (car hunk)))))
    (format "    approved in part: %d of %d hunks written; dropped: hunk %s"
            (- (length states) (length dropped)) (length states)
            (string-join dropped ", hunk "))))

(defun forj-review--hunk-at-point ()
  "The call id and hunk at point, (ID . (PATH . INDEX)), or signal why not."
  (let ((id (forj-review--id-at-point))
        (hunk (get-text-property (point) 'forj-review-hunk)))
    (unless hunk
      (user-error "No hunk at point: move onto a hunk of a diff (%s)"
                  (substitute-command-keys "\\<forj-review-mode-map>\\[forj-review-next-hunk]")))
    (let ((file (assoc (car hunk) (forj-review--hunk-files id))))
      (unless (and file (< (cdr hunk) (cdr file)))
        (user-error "%s"
                    (cond ((assoc (car hunk) (gethash id forj-review--modified))
                           "You edited this file in ediff: it is written as you edited it, whole")
                          ((gethash id forj-review--whole-only)
                           "This call's diff cannot be split into the hunks the worker counts: approve or deny it whole")
                          (t "This call can only be approved or denied whole (it moves or deletes files)"))))
      (cons id hunk))))

(defun forj-review-decide-hunk (id hunk state)
  "Record STATE for HUNK, (PATH . INDEX), of call ID.
STATE is `approved' or (dropped . REASON).
The call becomes approved in part.  The first hunk decision of a call
not yet decided gives its other hunks the opposite state (of a denied
call, they stay dropped; of an approved one, approved); every hunk
approved is the plain approval, every hunk dropped a denial (with the
reasons given)."
  (let* ((decision (gethash id forj-review--decisions))
         (states (or (copy-alist (gethash id forj-review--hunks))
                     (cl-loop for (path . count) in (forj-review--hunk-files id)
                              append (cl-loop for index below count
                                              collect (cons (cons path index)
                                                            (cond ((eq decision t) 'approved)
                                                                  ;; A denied call stays denied
                                                                  ;; but for what is approved.
                                                                  (decision (cons 'dropped nil))
                                                                  ((eq state 'approved)
                                                                   (cons 'dropped nil))
                                                                  (t 'approved))))))))
    (setf (alist-get hunk states nil nil #'equal) state)
    (cond
     ((cl-every (lambda (entry) (eq (cdr entry) 'approved)) states)
      (remhash id forj-review--hunks)
      (puthash id t forj-review--decisions))
     ((cl-notany (lambda (entry) (eq (cdr entry) 'approved)) states)
      (remhash id forj-review--hunks)
      (let ((reasons (delete-dups (delq nil (mapcar (lambda (entry)
                                                      (let ((reason (cdr-safe (cdr entry))))
                                                        (and reason (not (string-empty-p reason)) reason)))
                                                    states)))))
        ;; A reason given with the denial itself is kept.
        (forj-review-decide id (cons 'deny (if reasons (string-join reasons "; ")
                                             (cdr-safe decision))))))
     (t
      (puthash id states forj-review--hunks)
      (puthash id t forj-review--decisions)))
    (forj-review--render)
    (forj-review--goto-hunk id hunk)))

(defun forj-review--goto-hunk (id hunk)
  "Move to HUNK, (PATH . INDEX), of call ID, if it is in the review.
A redraw keeps the line number, but a decision adds or removes lines."
  (let ((pos (point-min)) (found nil))
    (while (and pos (not found))
      (if (and (equal (get-text-property pos 'forj-review-id) id)
               (equal (get-text-property pos 'forj-review-hunk) hunk))
          (setq found pos)
        (setq pos (next-single-property-change pos 'forj-review-hunk))))
    (when found (goto-char found))))

(defun forj-review-approve-hunk ()
  "Approve the hunk at point: the call is approved in part."
  (interactive (forj-review--ready))
  (pcase-let ((`(,id . ,hunk) (forj-review--hunk-at-point)))
    (forj-review-decide-hunk id hunk 'approved)))

(defun forj-review-drop-hunk ()
  "Drop the hunk at point: the call is approved without it."
  (interactive (forj-review--ready))
  (pcase-let ((`(,id . ,hunk) (forj-review--hunk-at-point)))
    (forj-review-decide-hunk id hunk (cons 'dropped nil))))

(defun forj-review-drop-hunk-with-reason (reason)
  "Drop the hunk at point and tell the model REASON."
  (interactive (progn (forj-review--ready)
                      (forj-review--hunk-at-point)
                      (list (read-string "Why drop this hunk? "))))
  (pcase-let ((`(,id . ,hunk) (forj-review--hunk-at-point)))
    (forj-review-decide-hunk id hunk (cons 'dropped (and (not (string-empty-p reason)) reason)))))

(defun forj-review--hunk-start (pos)
  "The start of the hunk at POS, or nil if POS is on none."
  (let ((hunk (get-text-property pos 'forj-review-hunk)))
    (when hunk
      (let ((start (previous-single-property-change (1+ pos) 'forj-review-hunk nil (point-min))))
        (if (equal (get-text-property start 'forj-review-hunk) hunk) start pos)))))

(defun forj-review-next-hunk ()
  "Move to the next hunk of a diff."
  (interactive)
  (let ((pos (point)))
    (when (get-text-property pos 'forj-review-hunk)
      (setq pos (next-single-property-change pos 'forj-review-hunk)))
    (when (and pos (not (get-text-property pos 'forj-review-hunk)))
      (setq pos (next-single-property-change pos 'forj-review-hunk)))
    (if pos (goto-char pos) (message "No next hunk"))))

(defun forj-review-previous-hunk ()
  "Move to the previous hunk of a diff."
  (interactive)
  (let* ((here (forj-review--hunk-start (point)))
         (pos (and (> (or here (point)) (point-min))
                   (forj-review--hunk-start (1- (or here (point)))))))
    (unless pos
      (let ((before (previous-single-property-change (or here (point)) 'forj-review-hunk)))
        (setq pos (and before (> before (point-min))
                       (forj-review--hunk-start (1- before))))))
    (if pos (goto-char pos) (message "No previous hunk"))))

(defun forj-review--hunks-field (id)
  "The user's word on the hunks of call ID as the worker takes it, or nil.
An alist of (PATH . (:approved [INDEX...] :dropped [(:index I :reason R)...]))."
  (let ((states (gethash id forj-review--hunks))
        (out nil))
    (dolist (entry states)
      (pcase-let* ((`((,path . ,index) . ,state) entry)
                   (slot (or (assoc path out) (car (push (list path nil nil) out)))))
        (if (eq state 'approved)
            (push index (nth 1 slot))
          (push (list :index index :reason (or (cdr state) "")) (nth 2 slot)))))
    (mapcar (lambda (slot)
              (cons (car slot)
                    (list :approved (vconcat (sort (nth 1 slot) #'<))
                          :dropped (vconcat (nreverse (nth 2 slot))))))
            (nreverse out))))

;;; Edit before approve

(defun forj-review-edit ()
  "Edit the proposed change of the call at point in ediff, then approve it.
The left side is the file as it is, the right side what the call
proposes; change the right side, then quit ediff (\`q') to approve
the call with your text.  Kill the proposed buffer instead to leave
the decision as it was."
  (interactive (forj-review--ready))
  (let ((id (forj-review--id-at-point))
        (review (current-buffer)))
    (unless forj-review--proposal-function
      (user-error "This review cannot fetch proposals to edit"))
    (message "forj: fetching the proposal of %s..." id)
    (funcall forj-review--proposal-function id
             (lambda (files)
               (when (buffer-live-p review)
                 (let ((file (if (cdr files)
                                 (let ((path (completing-read
                                              "Edit which file? "
                                              (mapcar (lambda (f) (plist-get f :path)) files)
                                              nil t)))
                                   (cl-find path files :key (lambda (f) (plist-get f :path))
                                            :test #'equal))
                               (car files))))
                   (message nil)
                   (when (forj-review--edit-after-drops-p review id (plist-get file :path))
                     (forj-review--ediff review id file)))))
             (lambda (err)
               (message "forj: cannot edit %s: %s" id (or (plist-get err :message) err))))))

(defun forj-review--edit-after-drops-p (review id path)
  "Whether to edit PATH of call ID in ediff, hunks of it dropped in REVIEW.
Ediff starts from the whole proposal, dropped hunks included, and what
is saved there is written whole: ask first, so they do not come back
unseen."
  (let ((dropped (and (buffer-live-p review)
                      (cl-loop for ((file . index) . state)
                               in (gethash id (buffer-local-value 'forj-review--hunks review))
                               when (and (equal file path) (consp state))
                               collect (1+ index)))))
    (or (null dropped)
        (yes-or-no-p
         (format "You dropped hunk %s of %s; ediff shows the whole proposal, those hunks included, and your text is written whole.  Edit anyway? "
                 (mapconcat #'number-to-string dropped ", ") path)))))

(defvar-local forj-review--edit nil
  "In a proposed buffer: (REVIEW-BUFFER ID PATH PROPOSED-TEXT OLD-TEXT EXISTED).")

(defun forj-review--mode-for (path)
  "The major mode `auto-mode-alist' gives PATH, or `fundamental-mode'."
  (let ((mode (assoc-default path auto-mode-alist #'string-match)))
    (when (consp mode) (setq mode (car mode)))
    (if (functionp mode) mode #'fundamental-mode)))

(defun forj-review-edit-buffers (review id file)
  "Make the current and proposed buffers of FILE (a proposal plist) of call ID.
REVIEW is the review buffer.  Return (CURRENT . PROPOSED); the
proposed buffer holds what the user edits, and
`forj-review-edit-finish' in it records the edit."
  (let* ((path (plist-get file :path))
         (mode (forj-review--mode-for path))
         (shown (substring-no-properties (forj-review-mark-invisible path)))
         (current (generate-new-buffer (format "*forj-current: %s*" shown)))
         (proposed (generate-new-buffer (format "*forj-proposed: %s*" shown))))
    (with-current-buffer current
      (insert (plist-get file :old))
      (ignore-errors (delay-mode-hooks (funcall mode)))
      (setq buffer-read-only t)
      (set-buffer-modified-p nil))
    (with-current-buffer proposed
      (insert (plist-get file :new))
      (ignore-errors (delay-mode-hooks (funcall mode)))
      (setq-local forj-review--edit (list review id path (plist-get file :new) (plist-get file :old)
                                          (not (eq (plist-get file :existed) :false))))
      (set-buffer-modified-p nil)
      (goto-char (point-min)))
    (cons current proposed)))

(defun forj-review-edit-finish (proposed)
  "Record the text of the buffer PROPOSED as the user's text for its call.
An unchanged proposal is simply approved.  An edited one is approved
with the user's text, and the review shows the diff of that text
against the file as soon as it is computed."
  (with-current-buffer proposed
    (pcase-let ((`(,review ,id ,path ,original ,old ,existed) forj-review--edit)
                (text (buffer-substring-no-properties (point-min) (point-max))))
      (when (buffer-live-p review)
        (with-current-buffer review
          (if (equal text original)
              (progn
                (forj-review--forget-user-diff id path)
                (forj-review-decide id t))
            (forj-review--set-user-diff id path 'pending)
            (forj-review-modify id path text)
            (forj-review--diff
             path (or old "") text existed
             (lambda (diff)
               (when (buffer-live-p review)
                 (with-current-buffer review
                   ;; A later edit of the same file may have replaced this one.
                   (when (equal (cdr (assoc path (gethash id forj-review--modified))) text)
                     (forj-review--set-user-diff id path diff)
                     (forj-review--render))))))))))))

(defun forj-review--set-user-diff (id path diff)
  "Record DIFF, the diff of the user's text for PATH in call ID."
  (puthash id (append (assoc-delete-all path (copy-alist (gethash id forj-review--user-diffs)))
                      (list (cons path diff)))
           forj-review--user-diffs)
  (remhash id forj-review--drawn-previews))

(defun forj-review--forget-user-diff (id path)
  "Forget the user's edit of PATH in call ID: the proposal stands again."
  (let ((diffs (assoc-delete-all path (copy-alist (gethash id forj-review--user-diffs)))))
    (if diffs (puthash id diffs forj-review--user-diffs) (remhash id forj-review--user-diffs)))
  (let ((edits (assoc-delete-all path (copy-alist (gethash id forj-review--modified)))))
    (if edits (puthash id edits forj-review--modified) (remhash id forj-review--modified)))
  (remhash id forj-review--drawn-previews))

(defun forj-review--diff (path old new existed callback)
  "Compute the diff from OLD to NEW, texts of PATH; call CALLBACK with it.
The diff is unified, with PATH in its header lines.  EXISTED is nil
for a file the call creates.  The diff program runs asynchronously,
on private temporary copies; CALLBACK gets the diff, or a line saying
why there is none."
  (let* ((dir (with-file-modes #o700 (make-temp-file "forj-review-" t)))
         (a (expand-file-name "old" dir))
         (b (expand-file-name "new" dir))
         (output (generate-new-buffer " *forj-review-diff*"))
         (coding-system-for-write 'utf-8-unix))
    (with-file-modes #o600
      (write-region old nil a nil 'silent)
      (write-region new nil b nil 'silent))
    (condition-case err
        (make-process
         :name "forj-review-diff"
         :buffer output
         :command (list "diff" "-u"
                        "--label" (if existed (concat "a/" path) "/dev/null")
                        "--label" (concat "b/" path)
                        a b)
         :coding 'utf-8-unix
         :connection-type 'pipe
         :noquery t
         :sentinel
         (lambda (process _event)
           (unless (process-live-p process)
             (let ((text (with-current-buffer output (buffer-string)))
                   (status (process-exit-status process)))
               (kill-buffer output)
               (delete-directory dir t)
               ;; diff exits 1 when the texts differ, 0 when they do not.
               (funcall callback
                        (if (memq status '(0 1))
                            text
                          (format "(the diff of your text could not be computed: %s)\n"
                                  (string-trim text))))))))
      (error
       (kill-buffer output)
       (delete-directory dir t)
       (funcall callback (format "(the diff of your text could not be computed: %s)\n"
                                 (error-message-string err)))))))

(defun forj-review--ediff (review id file)
  "Open FILE of call ID in ediff; on quit, record the edit in REVIEW.
The windows are put back as ediff found them: the review where it was."
  (require 'ediff)
  (let ((configuration (current-window-configuration))
        (frame (selected-frame)))
    (pcase-let ((`(,current . ,proposed) (forj-review-edit-buffers review id file)))
      (ediff-buffers
       current proposed
       (list (lambda ()
               (add-hook 'ediff-quit-hook
                         (lambda ()
                           (when (buffer-live-p proposed)
                             (forj-review-edit-finish proposed)
                             (kill-buffer proposed))
                           (when (buffer-live-p current) (kill-buffer current))
                           (when (frame-live-p frame)
                             (set-window-configuration configuration))
                           (when (buffer-live-p review)
                             (let ((window (get-buffer-window review frame)))
                               (if window (select-window window) (pop-to-buffer review)))))
                         ;; Run after ediff's own clean-up.
                         90 t)))))))

(provide 'forj-review)
;;; forj-review.el ends here
