;;; forj-tools.el --- Tool-call blocks: find, parse, and hand to the worker  -*- lexical-binding: t; -*-

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

;; A model asks for tools by writing fenced blocks:
;;
;;   ```tool-call
;;   {"id": "1", "name": "read_file", "args": {"path": "src/a.el"}}
;;   ```
;;
;; `forj-tools-parse-region' finds every such block in a region with
;; CommonMark's fence rules (``` or ~~~, three or more, closed by a fence
;; of the same character at least as long and with no info string), so a
;; tool-call fence shown inside another code block is content, not a
;; call.  One call per block; all blocks of one message form one batch,
;; in order.  A block that cannot be a call (broken JSON, trailing
;; garbage, no id or name, too large, never closed) becomes an error
;; entry with the position of the fault, never an Emacs error: the batch
;; flow answers it with an error result the model can act on.
;;
;; The batch flow follows: every call of a batch is planned by the
;; worker, the ones that need consent go to the review buffer
;; (forj-review.el), then the batch executes and each call's result is
;; drawn under it.  In any buffer (`forj-tools-mode') a result is drawn
;; as a header line and a tool-result block holding the worker's JSON
;; unchanged, since that buffer's text is what its model reads back.  A
;; buffer that keeps the record elsewhere (the chat) sets
;; `forj-tools-result-style' to `rendered' and gets results drawn for
;; people by forj-render.el, the exact JSON kept in a text property.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)

;;; Options

(defcustom forj-tools-max-block-bytes (* 1024 1024)
  "Largest tool-call block, in bytes, that is parsed at all.
Larger ones become error entries; the worker's own limit on arguments
\(256 KiB by default) applies to what passes."
  :type 'integer
  :group 'forj)

;;; Parsing

(defconst forj-tools--fence-re
  "^\\( \\{0,3\\}\\)\\(`\\{3,\\}\\|~\\{3,\\}\\)[ \t]*\\([^ \t\n`]*\\)[^\n]*$"
  "An opening or closing code fence: indent, fence, first word of the info string.")

(defun forj-tools-parse-region (beg end)
  "Parse the tool-call blocks between BEG and END in the current buffer.
Return a list, in buffer order, of plists: (:call CALL :beg B :end E)
for a block holding a call (CALL is the JSON object as a plist), or
\(:error MESSAGE :beg B :end E :id ID) for a block that cannot be one;
ID is the call's id when it could be read.  B and E span the whole
block, fences included."
  (save-excursion
    (save-restriction
      (widen)
      (goto-char beg)
      (unless (bolp) (forward-line 1))
      (let ((results nil)
            (open nil))                 ; (CHAR LENGTH INFO BLOCK-START CONTENT-START)
        (while (and (< (point) end) (not (eobp)))
          (let ((line-start (point))
                (line-end (line-end-position)))
            (when (looking-at forj-tools--fence-re)
              (let* ((fence (match-string-no-properties 2))
                     (info (downcase (match-string-no-properties 3)))
                     (rest (buffer-substring-no-properties (match-end 2) line-end)))
                (cond
                 ((null open)
                  (unless (and (eq (aref fence 0) ?`) (string-match-p "`" rest))
                    (setq open (list (aref fence 0) (length fence) info line-start
                                     (min (1+ line-end) (point-max))))))
                 ((and (eq (aref fence 0) (nth 0 open))
                       (>= (length fence) (nth 1 open))
                       (string-match-p "\\`[ \t]*\\'" rest))
                  (when (equal (nth 2 open) "tool-call")
                    (push (forj-tools--parse-block (nth 3 open) (nth 4 open) line-start
                                                   (min (1+ line-end) (point-max)))
                          results))
                  (setq open nil)))))
            (forward-line 1)))
        (when (and open (equal (nth 2 open) "tool-call"))
          (push (list :error (format "The tool-call block at line %d is never closed with ```"
                                     (line-number-at-pos (nth 3 open)))
                      :beg (nth 3 open) :end end :id nil)
                results))
        (nreverse results)))))

(defun forj-tools--parse-block (block-start content-start content-end block-end)
  "Parse one tool-call block.
The block spans BLOCK-START to BLOCK-END, fences included; its JSON
lies between CONTENT-START and CONTENT-END."
  (let ((text (buffer-substring-no-properties content-start content-end))
        (fail (lambda (message &optional id)
                (list :error message :beg block-start :end block-end :id id))))
    (cond
     ((> (string-bytes text) forj-tools-max-block-bytes)
      (funcall fail (format "The tool-call block at line %d is %d bytes, over the %d-byte limit"
                            (line-number-at-pos block-start) (string-bytes text)
                            forj-tools-max-block-bytes)))
     ((string-blank-p text)
      (funcall fail (format "The tool-call block at line %d is empty"
                            (line-number-at-pos block-start))))
     (t
      (condition-case err
          (let ((call (forj-tools-json-decode text)))
            (cond
             ((not (and (listp call) (keywordp (car-safe call))))
              (funcall fail (format "The tool-call block at line %d must hold one JSON object"
                                    (line-number-at-pos block-start))))
             ((not (and (stringp (plist-get call :id)) (> (length (plist-get call :id)) 0)))
              (funcall fail (format "The call at line %d has no \"id\" (a non-empty string)"
                                    (line-number-at-pos block-start))))
             ((not (and (stringp (plist-get call :name)) (> (length (plist-get call :name)) 0)))
              (funcall fail (format "The call at line %d has no \"name\" (the tool to run)"
                                    (line-number-at-pos block-start))
                       (plist-get call :id)))
             (t (list :call call :beg block-start :end block-end))))
        ;; Any error at all: json.el, when loaded, redefines some of the
        ;; native parser's error symbols, so `json-parse-error' alone
        ;; would not catch them all.
        (error
         (funcall fail (forj-tools--json-error-message err content-start))))))))

(defun forj-tools--json-error-message (err content-start)
  "A readable message for the JSON error ERR in a block starting at CONTENT-START."
  (let* ((data (cdr err))
         (what (if (stringp (car data)) (car data) "invalid JSON"))
         (line (and (integerp (nth 2 data)) (nth 2 data)))
         (column (and (integerp (nth 3 data)) (nth 3 data)))
         (first-line (line-number-at-pos content-start)))
    (if line
        (format "Invalid JSON in the tool-call block at line %d, column %d: %s"
                (+ first-line (max 0 (1- line))) (or column 0) what)
      (format "Invalid JSON in the tool-call block at line %d: %s" first-line what))))

(defun forj-tools-json-decode (text)
  "Decode JSON TEXT so that `forj-tools-json-encode' gives back the same JSON.
Objects become plists, arrays vectors, null `:null' and false `:false'."
  (json-parse-string text :object-type 'plist :array-type 'array
                     :null-object :null :false-object :false))

(defun forj-tools-json-encode (value)
  "Encode VALUE, as made by `forj-tools-json-decode', as JSON text."
  (json-serialize value :null-object :null :false-object :false))

;;; The batch flow: plan, review, execute, render

(require 'forj-worker)
(require 'forj-review)
(require 'forj-shell)
(require 'forj-render)
(require 'forj-files)
(require 'forj-hooks)
(require 'forj-notify)
;; Buffers follow the files forj moves and deletes, from
;; `forj-tools-after-batch-functions'.
(require 'forj-moves)

(defvar-local forj-tools-result-style 'raw
  "How this buffer's results are drawn.
`raw': a header line and a tool-result block with the worker's JSON,
for buffers whose text is what the model reads back.  `rendered': a
header and a body drawn for people (forj-render.el), the exact JSON
in the `forj-raw' text property, for buffers that keep the record
elsewhere.")

(defvar-local forj-tools-after-render-function nil
  "Called with the start and end of a batch's results after each drawing, or nil.")

(defcustom forj-tools-fold-chars 1200
  "Results longer than this many characters are folded.
The text stays in the buffer (the model reads it back); only the
display hides all but its start.  TAB on a folded result shows
it, as does \\<forj-tools-mode-map>\\[forj-tools-toggle-fold] on its line."
  :type 'natnum
  :group 'forj)

(defcustom forj-tools-button-scan-chars (* 256 1024)
  "How much of each result is scanned for paths to make into buttons."
  :type 'natnum
  :group 'forj)

(cl-defstruct (forj-tools-batch (:constructor forj-tools--make-batch) (:copier nil))
  "One batch of tool calls from one message."
  (buffer nil :documentation "The buffer holding the calls and the results.")
  (start nil :documentation "Marker: where the results are drawn.")
  (end nil :documentation "Marker: the end of the drawn results.")
  (entries nil :documentation "Parsed entries, in order.")
  (states nil :documentation "Vector: per entry, pending/running/done.")
  (results nil :documentation "Vector: per entry, the result plist (or nil).")
  (worker nil :documentation "The worker running the batch.")
  (batch-id nil :documentation "The worker's id for the batch.")
  (mode "enabled" :documentation "The tool loop mode it is planned in.")
  (shells nil :documentation "Vector: per entry, its output buffer (or nil).")
  (times nil :documentation "Vector: per entry, when it started, then how many ms it took.")
  (review nil :documentation "The batch's review buffer, while it is open.")
  (cancelled nil :documentation "Non-nil if the user cancelled the batch in review.")
  (callback nil :documentation "Called with the results when the batch is done.")
  (context nil :documentation "The consent context sent with the plan: mode and session.")
  (grants nil :documentation "Alist: approved call id -> the standing grant the user gave.")
  (hunks nil :documentation "Alist: call id approved in part -> its hunks, per file.")
  (consent nil :documentation "What the worker said of consent: :turn, :grants, :mode_note.")
  (turn nil :documentation "The id of the user message the batch answers, or nil.")
  (review-all nil :documentation "Non-nil: every call that would run is reviewed first."))

(defvar-local forj-tools-current-batch nil
  "The batch running in this buffer, if any.")

(defvar-local forj-tools-root nil
  "The project root whose worker this buffer has used.")

(defvar forj-tools-plan-mode "enabled"
  "The tool loop mode batches are planned in: enabled, parse_only or disabled.
In \"parse_only\" nothing runs: valid calls wait for results the user
supplies with `forj-tool-result'.  In \"disabled\" every call is
answered as invalid.  Bind it around `forj-tools-run-region'.")

;;; Consent context: which chat asks, in which mode, in which turn

(defvar-local forj-tools-permission-mode nil
  "This buffer's permission mode, sent with each plan and tool list request.
One of \"read-only\", \"ask\", \"accept-edits\" and \"auto\", or nil
for the mode the worker's configuration sets.  One worker serves every
chat of a project, so the mode travels with each request.")
(put 'forj-tools-permission-mode 'permanent-local t)

(defvar-local forj-tools-session nil
  "This buffer's session id for the worker, made on first use.
Session and timed grants hold for one session: one chat.")
(put 'forj-tools-session 'permanent-local t)

(defun forj-tools-session-id ()
  "The session id of the current buffer, made on first use."
  (or forj-tools-session
      (setq forj-tools-session
            (concat "chat-" (substring (secure-hash 'sha256 (format "%s %s %s %s" (random t) (float-time)
                                                                    (emacs-pid) (buffer-name)))
                                       0 20)))))

(defun forj-tools--consent-context ()
  "The consent fields of a plan request from the current buffer.
The turn travels with the batch (`forj-tools-turn')."
  (append (and forj-tools-permission-mode (list :permission_mode forj-tools-permission-mode))
          (list :session (forj-tools-session-id))))

(defvar forj-tools-turn nil
  "The turn (id of the user message) new batches answer, or nil.
The worker groups checkpoints by it, and undo and rewind name it.
Bind it around `forj-tools-run-entries'.")

(defvar forj-tools-review-all nil
  "Non-nil: new batches show every call that would run in the review.
Resumed calls of an interrupted batch run only once the user approves
each of them again.  Bind it around `forj-tools-run-entries'.")

(defun forj-tools-run-region (beg end &optional callback root)
  "Run the tool-call blocks between BEG and END as one batch.
Results are drawn after END as tool-result blocks.  CALLBACK, if
given, is called with the list of result plists when the batch ends.
ROOT is the project root (default: the current buffer's project).
Everything waits asynchronously; Emacs stays usable."
  (let ((entries (forj-tools-parse-region beg end)))
    (if (null entries)
        (progn (message "forj: no tool-call blocks here") nil)
      (forj-tools-run-entries entries end callback root))))

(defun forj-tools-run-entries (entries where &optional callback root)
  "Run ENTRIES (parsed by `forj-tools-parse-region') as one batch.
Results are drawn at WHERE in the current buffer; CALLBACK and ROOT
are as for `forj-tools-run-region'.  Return the batch."
  (let ((batch (forj-tools-new-batch entries where callback)))
    (setq forj-tools-current-batch batch)
    (forj-tools--render batch)
    (setq forj-tools-root (or root (forj-worker-project-root)))
    (forj-worker-ensure forj-tools-root
                        (lambda (worker) (forj-tools--plan batch worker))
                        (lambda (err) (forj-tools-fail-all batch err)))
    batch))

(defun forj-tools-new-batch (entries end callback)
  "A batch of the parsed ENTRIES, its results drawn after END; CALLBACK gets them."
  (let ((start (copy-marker (save-excursion (goto-char end)
                                            (unless (bolp) (insert "\n"))
                                            (point)))))
    (forj-tools--make-batch
     :mode forj-tools-plan-mode
     :context (forj-tools--consent-context)
     :turn forj-tools-turn
     :review-all forj-tools-review-all
     :buffer (current-buffer)
     :start start
     :end (copy-marker start t)
     :entries entries
     :states (make-vector (length entries) 'pending)
     :results (make-vector (length entries) nil)
     :shells (make-vector (length entries) nil)
     :times (make-vector (length entries) nil)
     :callback callback)))

(defun forj-tools--plan (batch worker)
  "Have WORKER plan every tool call of BATCH."
  (setf (forj-tools-batch-worker batch) worker)
  (forj-tools--guard-unsaved batch (plist-get (forj-worker-hello worker) :root))
  ;; The user's own checks may deny calls before the worker sees them.
  (forj-hooks-before-plan (forj-tools-batch-entries batch) (forj-tools-batch-results batch)
                          (plist-get (forj-worker-hello worker) :root))
  (let ((conn (forj-worker-connection worker))
        (calls (cl-loop for entry in (forj-tools-batch-entries batch)
                        for index from 0
                        when (and (plist-get entry :call) (null (aref (forj-tools-batch-results batch) index)))
                        collect (plist-get entry :call))))
    (setf (forj-epc-connection-on-event conn) #'forj-tools--dispatch-event)
    (if (null calls)
        (forj-tools--finish batch)
      ;; The calls are journaled before anything is decided about them, so
      ;; a crash from here on leaves the record of what the model asked.
      (forj-epc-call conn "journal_calls" (forj-tools--with-turn batch (list :calls (vconcat calls)))
                     :success
                     (lambda (reply)
                       (setf (forj-tools-batch-batch-id batch) (plist-get reply :batch_id))
                       (forj-epc-call conn "plan"
                                      (forj-tools--with-turn
                                       batch (append (list :batch_id (plist-get reply :batch_id)
                                                           :mode (forj-tools-batch-mode batch)
                                                           :tab_widths (forj-tools--tab-widths
                                                                        (plist-get (forj-worker-hello worker) :root)))
                                                     (forj-tools-batch-context batch)))
                                      :success (lambda (plan) (forj-tools--review batch plan))
                                      :error (lambda (err) (forj-tools-fail-all batch err))))
                     :error (lambda (err) (forj-tools-fail-all batch err))))))

(defun forj-tools--tab-widths (root)
  "The `tab-width' of each buffer visiting a file under ROOT, for the worker.
What the user sees is how the edit tools count a tab's columns where
neither the file nor `.editorconfig' says (see docs/tools.md)."
  (let ((prefix (and root (file-name-as-directory (expand-file-name root))))
        (widths nil))
    (dolist (buffer (buffer-list))
      (let ((file (buffer-file-name buffer))
            (width (buffer-local-value 'tab-width buffer)))
        ;; Names compared as text: no file system call per buffer (a
        ;; remote project would pay a round trip for each).
        (when (and prefix file (natnump width) (<= 1 width 32) (< (length widths) 1024)
                   (string-prefix-p prefix (expand-file-name file)))
          (push (list :path (substring (expand-file-name file) (length prefix)) :width width)
                widths))))
    (vconcat widths)))

(defun forj-tools--with-turn (batch body)
  "BODY (a plist) with BATCH's turn added when it has one."
  (if (forj-tools-batch-turn batch)
      (append body (list :turn (forj-tools-batch-turn batch)))
    body))

(defvar forj-tools--batches (make-hash-table :test #'equal)
  "Batches being executed, by the worker's batch id: where events go.")

(defun forj-tools--dispatch-event (event)
  "Hand a worker EVENT to the batch it belongs to."
  (let ((batch (gethash (plist-get event :batch_id) forj-tools--batches)))
    (when batch (forj-tools--event batch event))))

(defun forj-tools--review (batch plan)
  "Ask the user about the confirm items of PLAN, then execute BATCH."
  (setf (forj-tools-batch-batch-id batch) (plist-get plan :batch_id))
  (setf (forj-tools-batch-consent batch) (forj-tools--consent-of plan))
  (puthash (plist-get plan :batch_id) batch forj-tools--batches)
  (if (equal (plist-get plan :mode) "parse_only")
      (forj-tools--await-manual batch plan)
    (forj-tools--review-and-execute batch plan)))

(defun forj-tools--review-item (item)
  "Return ITEM of a plan as the review is to show it.
Notes about uncommitted changes made outside forj come first, with the
worker's warnings; an item that would run without asking (in a batch
whose every call is reviewed) says so."
  (let* ((notes (append (plist-get item :notes) nil))
         (warnings (append notes (append (plist-get item :warnings) nil)))
         (item (if warnings (plist-put (copy-sequence item) :warnings (vconcat warnings)) item)))
    (if (equal (plist-get item :disposition) "execute")
        (plist-put (copy-sequence item) :summary
                   (concat (or (plist-get item :summary) (plist-get item :name) "")
                           "  (recovered call: runs only if you approve it again)"))
      item)))

(defun forj-tools--review-and-execute (batch plan)
  "Open the review for PLAN's confirm items if any, then execute BATCH.
In a batch that reviews everything, `execute' items are shown too."
  (let* ((items (append (plist-get plan :items) nil))
         (shown (if (forj-tools-batch-review-all batch) '("confirm" "execute") '("confirm")))
         (review (cl-remove-if-not (lambda (item) (member (plist-get item :disposition) shown)) items)))
    (dolist (item items)
      (when (and (equal (plist-get item :disposition) "execute") (plist-get item :notes)
                 (not (forj-tools-batch-review-all batch)))
        (message "forj: %s" (string-join (append (plist-get item :notes) nil) " "))))
    ;; The user may be elsewhere: say a review waits (forj-notify.el).
    (when review
      (forj-notify 'review (forj-tools-batch-buffer batch)
                   (format "forj: a review is waiting for you in %s"
                           (buffer-name (forj-tools-batch-buffer batch)))))
    (if review
        (setf (forj-tools-batch-review batch)
              (forj-review-open (mapcar #'forj-tools--review-item review)
                                (lambda (approved denied modified &optional cancelled grants hunks)
                                  (setf (forj-tools-batch-review batch) nil
                                        (forj-tools-batch-grants batch) grants
                                        (forj-tools-batch-hunks batch) hunks)
                                  (cond
                                   (cancelled (forj-tools--cancel-in-review batch))
                                   ((forj-tools--denied-to-run items denied)
                                    (forj-tools--execute-without batch items approved denied modified))
                                   (t (forj-tools--execute batch approved denied modified))))
                                (lambda (id ok fail) (forj-tools--proposal batch id ok fail))
                                (list :timeout (plist-get plan :review_timeout_seconds)
                                      :mode-note (plist-get plan :mode_note))))
      (forj-tools--execute batch nil nil nil))))

(defun forj-tools--denied-to-run (items denied)
  "The ids of ITEMS that would run without asking but are in DENIED."
  (cl-loop for item in items
           when (and (equal (plist-get item :disposition) "execute")
                     (assoc (plist-get item :id) denied))
           collect (plist-get item :id)))

(defun forj-tools--execute-without (batch items approved denied modified)
  "Run BATCH without the `execute' ITEMS the user DENIED.
The worker runs an `execute' item whatever the decisions say, so the
planned batch is cancelled (nothing in it runs) and the calls the user
let through are planned again as a batch of their own, then executed
with the APPROVED ids and MODIFIED texts.  The denied calls are
answered as denied, with the user's reasons."
  (let* ((conn (forj-worker-connection (forj-tools-batch-worker batch)))
         (dropped (forj-tools--denied-to-run items denied))
         (old-id (forj-tools-batch-batch-id batch)))
    (cl-loop for entry in (forj-tools-batch-entries batch)
             for index from 0
             for call = (plist-get entry :call)
             when (and call (member (plist-get call :id) dropped))
             do (let ((reason (cdr (assoc (plist-get call :id) denied))))
                  (aset (forj-tools-batch-results batch) index
                        (list :id (plist-get call :id) :name (plist-get call :name) :ok :false
                              :error (list :type "permission-error"
                                           :message (if (string-empty-p (or reason ""))
                                                        "The user denied this call"
                                                      (concat "The user denied this call: " reason))
                                           :details (list :kind "UserDenied")
                                           :recovery ["Ask the user before trying this call again"])))))
    (let ((kept (cl-loop for entry in (forj-tools-batch-entries batch)
                         for index from 0
                         for call = (plist-get entry :call)
                         when (and call (null (aref (forj-tools-batch-results batch) index)))
                         collect call)))
      ;; Cancelled, then executed: every call comes back cancelled and the
      ;; batch is closed in the journal, not left to recover.
      (forj-epc-call conn "cancel" (list :batch_id old-id)
                     :success (lambda (_) (forj-epc-call conn "execute" (list :batch_id old-id)))
                     :error #'ignore)
      (remhash old-id forj-tools--batches)
      (if (null kept)
          (forj-tools--finish batch)
        (forj-epc-call conn "plan" (forj-tools--with-turn
                                    batch (append (list :calls (vconcat kept)
                                                        :mode (forj-tools-batch-mode batch))
                                                  (forj-tools-batch-context batch)))
                       :success
                       (lambda (plan)
                         (setf (forj-tools-batch-batch-id batch) (plist-get plan :batch_id))
                         (puthash (plist-get plan :batch_id) batch forj-tools--batches)
                         (forj-tools--execute batch approved denied modified))
                       :error (lambda (err) (forj-tools-fail-all batch err)))))))

(defun forj-tools--cancel-in-review (batch)
  "Answer every call of BATCH as cancelled: the user cancelled it in review."
  (setf (forj-tools-batch-cancelled batch) t)
  (forj-tools-fail-all batch (list :type "cancelled"
                                   :message "The user cancelled this batch in review; nothing ran"
                                   :recovery ["Ask the user how to go on before calling tools again"])))

(defun forj-tools--await-manual (batch plan)
  "Parse-only BATCH: fill PLAN's resolved results, leave the rest to the user."
  (let ((items (append (plist-get plan :items) nil)))
    (cl-loop for entry in (forj-tools-batch-entries batch)
             for index from 0
             when (plist-get entry :call)
             do (let ((item (pop items)))
                  (if (equal (plist-get item :disposition) "manual")
                      (aset (forj-tools-batch-states batch) index 'manual)
                    (aset (forj-tools-batch-results batch) index (plist-get item :result))
                    (aset (forj-tools-batch-states batch) index 'done))))
    (if (cl-find 'manual (forj-tools-batch-states batch))
        (progn
          (forj-tools--render batch)
          (message (substitute-command-keys
                    "forj: tools are in parse-only mode; give each call its result with \\[forj-tool-result]")))
      (forj-tools--finish batch))))

(defun forj-tools-manual-entries (batch)
  "The (INDEX . CALL) pairs of BATCH still waiting for a result from the user."
  (cl-loop for entry in (forj-tools-batch-entries batch)
           for index from 0
           when (eq (aref (forj-tools-batch-states batch) index) 'manual)
           collect (cons index (plist-get entry :call))))

;;;###autoload
(defun forj-tool-result (id result &optional failed)
  "Give the pending call ID (parse-only mode) its RESULT, then go on.
RESULT is JSON (used as it is) or plain text (used as a string).
With a prefix argument, FAILED: RESULT is an error message instead."
  (interactive
   (let* ((batch (or forj-tools-current-batch (user-error "No batch waits for results here")))
          (pending (or (forj-tools-manual-entries batch)
                       (user-error "No call waits for a result here")))
          (choices (mapcar (lambda (p) (cons (format "%s (%s)" (plist-get (cdr p) :id)
                                                     (plist-get (cdr p) :name))
                                             (plist-get (cdr p) :id)))
                           pending))
          (id (cdr (assoc (completing-read "Result for call: " choices nil t nil nil (caar choices))
                          choices))))
     (list id
           (read-string (format (if current-prefix-arg "Error message for %s: "
                                  "Result for %s (JSON or text): ")
                                id))
           current-prefix-arg)))
  (let* ((batch (or forj-tools-current-batch (user-error "No batch waits for results here")))
         (pair (or (cl-find id (forj-tools-manual-entries batch)
                            :key (lambda (p) (plist-get (cdr p) :id)) :test #'equal)
                   (user-error "No call %s waits for a result" id)))
         (call (cdr pair)))
    (aset (forj-tools-batch-results batch) (car pair)
          (if failed
              (list :id id :name (plist-get call :name) :ok :false
                    :error (list :type "process-error" :message result
                                 :details (list :kind "ExecutionFailed" :supplied_by "user")
                                 :recovery ["Read the message; the user supplied this result by hand"]))
            (list :id id :name (plist-get call :name) :ok t
                  :result (condition-case nil (forj-tools-json-decode result)
                            (error result)))))
    (aset (forj-tools-batch-states batch) (car pair) 'done)
    (if (forj-tools-manual-entries batch)
        (forj-tools--render batch)
      (forj-tools--finish batch))))

(defun forj-tools-refuse-region (beg end message &optional callback)
  "Answer every tool-call block between BEG and END with the error MESSAGE.
Nothing is sent to the worker.  The results are drawn after END as for
`forj-tools-run-region'; CALLBACK gets them.  Return the batch."
  (let ((entries (forj-tools-parse-region beg end)))
    (when entries
      (forj-tools-refuse-entries entries end message callback))))

(defun forj-tools-refuse-entries (entries where message &optional callback)
  "Answer ENTRIES with the error MESSAGE, drawn at WHERE; CALLBACK gets them.
As `forj-tools-refuse-region' for entries already parsed.  Return the batch."
  (let ((batch (forj-tools-new-batch entries where callback)))
    (forj-tools-fail-all batch (list :type "validation-error" :message message
                                     :recovery ["Answer the user with what you have found so far"]))
    batch))

(defun forj-tools--proposal (batch id ok fail)
  "Fetch the proposal of call ID in BATCH; call OK with its files or FAIL."
  (forj-epc-call (forj-worker-connection (forj-tools-batch-worker batch)) "proposal"
                 (list :batch_id (forj-tools-batch-batch-id batch) :call_id id)
                 :success (lambda (reply) (funcall ok (append (plist-get reply :files) nil)))
                 :error fail))

(defcustom forj-tools-unsaved-buffers 'ask
  "What to do when a call would change a file that has unsaved changes in Emacs.
`ask' asks whether to save the buffer first (no means the call is denied),
`save' saves it, `deny' denies the call.  Either way Emacs never ends up
with a buffer that disagrees with the file without knowing it."
  :type '(choice (const :tag "Ask" ask)
                 (const :tag "Save the buffer first" save)
                 (const :tag "Deny the call" deny))
  :group 'forj)

(defcustom forj-tools-read-only-buffers 'ask
  "What to do when a call would change a file whose buffer is read-only.
`ask' asks whether to let the call change the file anyway (no, the
default answer, means the call is not run); `deny' refuses the call.
A read-only buffer is never written behind the user's back."
  :type '(choice (const :tag "Ask" ask)
                 (const :tag "Refuse the call" deny))
  :group 'forj)

(defvar-local forj-tools-capacity-bytes nil
  "Room left in the model's context for this buffer's results, in bytes.
The chat sets this from its context estimate; nil lets the worker use
its conservative default (64 KiB per result).")

(defconst forj-tools--writing-tools
  '("write_file" "file_write" "edit_region" "edit" "multi_edit" "file_patch"
    "apply_patch" "fs_move" "fs_copy" "fs_delete" "ast_edit")
  "Tools that change files, whose targets may be visited in Emacs.")

(defun forj-tools--patch-paths (patch)
  "The files PATCH names: a `*** Begin Patch' envelope or a unified diff."
  (let (paths)
    (when (stringp patch)
      (dolist (line (split-string patch "\n"))
        (when (string-match
               (concat "\\`\\(?:\\*\\*\\* \\(?:Add\\|Update\\|Delete\\) File: \\|"
                       "\\*\\*\\* Move to: \\|\\(?:---\\|\\+\\+\\+\\) \\(?:[ab]/\\)?\\)"
                       "\\([^\t]+?\\)[ \t]*\\'")
               line)
          (let ((path (match-string 1 line)))
            (unless (equal path "/dev/null") (push path paths))))))
    (delete-dups (nreverse paths))))

(defun forj-tools-call-paths (call)
  "The files CALL would change, as given in its arguments."
  (when (member (plist-get call :name) forj-tools--writing-tools)
    (let ((args (plist-get call :args)))
      (delq nil
            (pcase (plist-get call :name)
              ("multi_edit" (delete-dups (mapcar (lambda (e) (plist-get e :path))
                                                 (append (plist-get args :edits) nil))))
              ("apply_patch" (forj-tools--patch-paths (plist-get args :patch)))
              ((or "fs_move" "fs_copy") (list (plist-get args :src) (plist-get args :dst)))
              (_ (list (plist-get args :path))))))))

(defconst forj-tools--ast-extensions
  '("py" "pyi" "js" "mjs" "cjs" "jsx" "ts" "mts" "cts" "tsx" "go" "rs" "c" "h")
  "Extensions of the files `ast_edit' may change (the languages it reads).")

(defun forj-tools--unsaved-source-paths (root)
  "Files under ROOT, relative to it, whose buffers hold unsaved source code.
An `ast_edit' call names no file: the worker finds them.  Any of these
may be among them, so they are saved (or the call refused) first."
  (let ((top (file-name-as-directory (file-truename root)))
        paths)
    (dolist (buffer (buffer-list))
      (let ((file (buffer-file-name buffer)))
        (when (and file (buffer-modified-p buffer)
                   (member (file-name-extension file) forj-tools--ast-extensions))
          (let ((true (file-truename file)))
            (when (string-prefix-p top true)
              (push (substring true (length top)) paths))))))
    (nreverse paths)))

(defun forj-tools--project-file (path root &optional cwd)
  "The true name of the file PATH names inside ROOT, or nil.
PATH comes from the model, relative to CWD (itself relative to ROOT,
default the root).  A path that is absolute, holds a .. component, or
leads outside ROOT once links are resolved names no file of the
project: the worker refuses such a call anyway, and Emacs must not
touch the user's other buffers because of it.  A leading ~ is a
directory named ~ inside the project, as for the worker, never the
home directory."
  (let ((file-name-handler-alist nil))
    (cl-flet ((relative-p (name)
                (and (stringp name)
                     (not (string-empty-p name))
                     (not (string-prefix-p "/" name))
                     (not (member ".." (split-string name "[/\\]"))))))
      (when (and (relative-p path) (or (null cwd) (relative-p cwd)))
        (let* ((top (file-name-as-directory (file-truename root)))
               ;; "./" first: a leading ~ is a name here, not the home directory.
               (base (file-name-as-directory (expand-file-name (concat "./" (or cwd ".")) top)))
               ;; A link cycle names no file.
               (file (ignore-errors (file-truename (expand-file-name (concat "./" path) base)))))
          (and file
               (string-prefix-p top file)
               (not (equal (file-name-as-directory file) top))
               file))))))

(defun forj-tools--project-buffer (path root &optional cwd)
  "The buffer visiting the project file PATH (relative to CWD in ROOT), or nil.
Only buffers of files inside ROOT count; see `forj-tools--project-file'."
  (let ((file (forj-tools--project-file path root cwd)))
    (when file
      (let ((buffer (find-buffer-visiting file)))
        (and buffer
             (buffer-file-name buffer)
             (equal (file-truename (buffer-file-name buffer)) file)
             buffer)))))

(defun forj-tools--guard-unsaved (batch root)
  "Before planning BATCH, deal with unsaved buffers of files it would change.
ROOT is the project root.  Buffers are saved where allowed, so previews
show the file as the user has it; a call the user will not let through
is not sent, and becomes that tool's refusal naming the file and what
to do next.  Only buffers visiting files inside ROOT are considered,
whatever path a call names."
  (setf (forj-tools-batch-entries batch)
        (mapcar
         (lambda (entry)
           (let* ((call (plist-get entry :call))
                  (ast (equal (plist-get call :name) "ast_edit"))
                  (cwd (and (not ast) (plist-get (plist-get call :meta) :cwd)))
                  (refusal nil)
                  (recovery nil)
                  (saved nil))
             (dolist (path (and call (if ast
                                         (forj-tools--unsaved-source-paths root)
                                       (forj-tools-call-paths call))))
               (let ((buffer (forj-tools--project-buffer path root (and (stringp cwd) cwd))))
                 (when (and buffer (not refusal)
                            (buffer-local-value 'buffer-read-only buffer)
                            (not (and (eq forj-tools-read-only-buffers 'ask)
                                      (yes-or-no-p
                                       (format "%s is read-only in Emacs; let %s change the file anyway? "
                                               (buffer-name buffer) (plist-get call :name))))))
                   (setq refusal (format "%s is read-only in the user's Emacs, so %s was not run"
                                         path (plist-get call :name))
                         recovery (list (format "Tell the user %s must change; they can make it writable (C-x C-q in its buffer) and ask again" path)
                                        "Do not try to change it another way")))
                 (when (and buffer (buffer-modified-p buffer) (not refusal))
                   (if (pcase forj-tools-unsaved-buffers
                         ('save t)
                         ('deny nil)
                         (_ (yes-or-no-p (format "%s has unsaved changes; save it before %s changes it? "
                                                 (buffer-name buffer) (plist-get call :name)))))
                       (progn (with-current-buffer buffer (save-buffer))
                              (push path saved))
                     (setq refusal (format "The user has unsaved changes to %s in Emacs, so %s was not run"
                                           path (plist-get call :name))
                           recovery (list (format "Ask the user to save or revert %s, then read it again and retry" path)))))))
             (cond (refusal
                    (list :error refusal :refused call :recovery recovery
                          :beg (plist-get entry :beg) :end (plist-get entry :end)
                          :id (plist-get call :id)))
                   (saved (append (list :saved saved) entry))
                   (t entry))))
         (forj-tools-batch-entries batch))))

(defun forj-tools--saved-first (entry result)
  "RESULT of ENTRY's call, telling the truth when Emacs saved its file first.
A file whose unsaved changes were saved before the call no longer holds
what the model read: the stale-file refusal says so, not \"never read\"."
  (let ((saved (plist-get entry :saved))
        (err (plist-get result :error)))
    (if (and saved (equal (plist-get err :type) "stale-file"))
        (plist-put (copy-sequence result) :error
                   (plist-put (copy-sequence err) :message
                              (format "The user's unsaved changes to %s were saved before this call, so the file is no longer what you read; the call was not run.  Read it again, then redo the change on what it holds now"
                                      (string-join saved ", "))))
      result)))

(defun forj-tools--table (alist)
  "A JSON object (hash table) made of ALIST's string keys and values."
  (let ((table (make-hash-table :test #'equal)))
    (dolist (pair alist) (puthash (car pair) (cdr pair) table))
    table))

(defun forj-tools--consent-of (reply)
  "The consent part of a plan or execute REPLY, as a plist.
:turn the state of the turn, :grants the grants stored, :mode_note
why the chat's mode was not honoured, :permission_mode the mode used.
Once the batch has executed, :plan-turn is the plan's :turn."
  (cl-loop for key in '(:turn :grants :mode_note :permission_mode)
           when (plist-get reply key) append (list key (plist-get reply key))))

(defun forj-tools--grants-field (batch)
  "The `grants' of BATCH's execute request: standing grants the user gave."
  (cl-loop for (id . grant) in (forj-tools-batch-grants batch)
           unless (equal (plist-get grant :scope) "once")
           collect (cons id grant)))

(defun forj-tools--execute (batch approved denied modified)
  "Execute BATCH with the user's APPROVED ids and DENIED (id . reason) pairs.
MODIFIED pairs ids with alists of (path . text) the user wrote instead
of the proposal.  Standing grants the user gave in the review go along;
when the worker refuses one (its pattern does not cover the call),
nothing has run, and the batch executes with the same approvals, each
for this once, and the user is told."
  (let ((grants (forj-tools--grants-field batch)))
    (forj-tools--execute-request
     batch approved denied modified grants
     (and grants
          (lambda (err)
            (setf (forj-tools-batch-grants batch) nil)
            (message "forj: no grant was stored: %s; the approved calls run this once"
                     (or (plist-get err :message) err))
            (forj-tools--execute-request batch approved denied modified nil nil))))))

(defun forj-tools--execute-request (batch approved denied modified grants on-refused)
  "Send BATCH's execute request: APPROVED, DENIED, MODIFIED and GRANTS.
A `bad-request' answer goes to ON-REFUSED when given; any other error
fails every call."
  (forj-epc-call (forj-worker-connection (forj-tools-batch-worker batch)) "execute"
                 (list :batch_id (forj-tools-batch-batch-id batch)
                       :grants (forj-tools--table grants)
                       :capacity_bytes (or (and (buffer-live-p (forj-tools-batch-buffer batch))
                                                (buffer-local-value 'forj-tools-capacity-bytes
                                                                    (forj-tools-batch-buffer batch)))
                                           :null)
                       :approved (vconcat approved)
                       :denied (forj-tools--table denied)
                       :modified (forj-tools--table
                                  (mapcar (lambda (pair)
                                            (cons (car pair) (forj-tools--table (cdr pair))))
                                          modified))
                       ;; Calls approved in part: which hunks of which files.
                       :hunks (forj-tools--table
                               (mapcar (lambda (pair)
                                         (cons (car pair) (forj-tools--table (cdr pair))))
                                       (forj-tools-batch-hunks batch))))
                 :success (lambda (reply)
                            (when (cl-some (lambda (grant)
                                             (member (plist-get (cdr grant) :scope) '("session" "minutes")))
                                           grants)
                              (forj-worker-note-chat-grants (forj-tools-batch-worker batch)))
                            ;; The execute reply's turn says what really ran; the
                            ;; plan's is kept too, for `continue_loop', which only
                            ;; the plan reports.
                            (let ((planned (forj-tools-batch-consent batch)))
                              (setf (forj-tools-batch-consent batch)
                                    (append (forj-tools--consent-of reply)
                                            (list :plan-turn (plist-get planned :turn))
                                            planned)))
                            (forj-tools--results batch (plist-get reply :results)))
                 :error (lambda (err)
                          (if (and on-refused (equal (plist-get err :type) "bad-request"))
                              (funcall on-refused err)
                            (forj-tools-fail-all batch err)))))

(defconst forj-tools--streaming-tools '("run_shell" "run_tests")
  "Tools whose output streams into a `*forj-shell: ID*' buffer.")

(defun forj-tools--event (batch event)
  "Show a worker EVENT of BATCH: a call started, wrote output, or finished."
  (let* ((index (forj-tools--index-of batch (plist-get event :call_id)))
         (kind (plist-get event :kind))
         (shells (forj-tools-batch-shells batch)))
    (when index
      (pcase kind
        ((or "stdout" "stderr")
         (let ((shell (or (aref shells index)
                          (aset shells index (forj-tools--start-shell batch index)))))
           (forj-shell-append shell kind (plist-get event :data))))
        ((or "started" "finished")
         (let ((started (equal kind "started"))
               (times (forj-tools-batch-times batch)))
           (aset (forj-tools-batch-states batch) index (if started 'running 'pending))
           (if started
               (aset times index (float-time))
             (when (floatp (aref times index))
               (aset times index (round (* 1000 (- (float-time) (aref times index)))))))
           (when (and started
                      (member (plist-get (plist-get (nth index (forj-tools-batch-entries batch)) :call) :name)
                              forj-tools--streaming-tools))
             (aset shells index (forj-tools--start-shell batch index)))
           (when (and (not started) (aref shells index))
             (forj-shell-finish (aref shells index) (eq (plist-get event :ok) t)))
           (forj-tools--render batch)
           (forj-tools--spin batch started)))))))

(defun forj-tools--start-shell (batch index)
  "The output buffer of the call at INDEX in BATCH, started afresh."
  (let ((entry (nth index (forj-tools-batch-entries batch)))
        (buffer (forj-tools-batch-buffer batch)))
    (forj-shell-buffer (plist-get (plist-get entry :call) :id)
                       (forj-tools--header entry 'running nil)
                       (and (buffer-live-p buffer)
                            (with-current-buffer buffer (copy-marker (plist-get entry :beg)))))))

;;; The spinner

(defconst forj-tools--spinner-frames ["⠋" "⠙" "⠹" "⠸" "⠼" "⠴" "⠦" "⠧" "⠇" "⠏"]
  "The frames of the running call's spinner.")

(defvar forj-tools--spinning nil
  "Batches with a running call, whose spinner turns.")

(defvar forj-tools--spinner-timer nil
  "The timer turning every spinner, while any batch runs a call.")

(defun forj-tools--spin (batch on)
  "Turn BATCH's spinner ON or off.
The shared timer runs while any spinner turns."
  (setq forj-tools--spinning (delq batch forj-tools--spinning))
  (when on (push batch forj-tools--spinning))
  (cond ((and forj-tools--spinning (not forj-tools--spinner-timer))
         (setq forj-tools--spinner-timer (run-at-time 0.1 0.1 #'forj-tools--spinner-tick)))
        ((and (null forj-tools--spinning) forj-tools--spinner-timer)
         (cancel-timer forj-tools--spinner-timer)
         (setq forj-tools--spinner-timer nil))))

(defun forj-tools--spinner-frame ()
  "Return the spinner frame for now, the same for every spinner."
  (aref forj-tools--spinner-frames
        (mod (floor (* 10 (float-time))) (length forj-tools--spinner-frames))))

(defun forj-tools--spinner-tick ()
  "Advance the spinner of every running call by one frame."
  (let ((frame (forj-tools--spinner-frame)))
    (dolist (batch forj-tools--spinning)
      (let ((buffer (forj-tools-batch-buffer batch)))
        (if (not (buffer-live-p buffer))
            (forj-tools--spin batch nil)
          (with-current-buffer buffer
            (with-silent-modifications
              (save-excursion
                (let ((pos (forj-tools-batch-start batch))
                      (end (forj-tools-batch-end batch)))
                  (while (and pos (< pos end))
                    (setq pos (text-property-any pos end 'forj-tools-spinner t))
                    (when pos
                      (goto-char pos)
                      ;; The new frame keeps the old one's properties
                      ;; (faces, read-only history, links).
                      (let ((props (text-properties-at pos)))
                        (delete-char 1)
                        (insert (apply #'propertize frame props)))
                      (setq pos (1+ pos)))))))))))))

(defun forj-tools--index-of (batch id)
  "The position in BATCH of the parsed call with ID, or nil."
  (cl-position-if (lambda (entry) (equal (plist-get (plist-get entry :call) :id) id))
                  (forj-tools-batch-entries batch)))

(defun forj-tools--results (batch results)
  "Match RESULTS (in call order) to BATCH's entries, then finish.
Entries that already have a result (denied before the batch was
planned again without them) keep it."
  (let ((remaining (append results nil)))
    (cl-loop for entry in (forj-tools-batch-entries batch)
             for index from 0
             when (and (plist-get entry :call) (null (aref (forj-tools-batch-results batch) index)))
             do (aset (forj-tools-batch-results batch) index (pop remaining))))
  (forj-tools--finish batch))

(defvar forj-tools--took (make-hash-table :test #'eq :weakness 'key)
  "How many milliseconds each finished result's call took.
The key is the result itself.")

(defun forj-tools-fail-all (batch err)
  "End BATCH with ERR (a plist) as the error of every unfinished call."
  (cl-loop for entry in (forj-tools-batch-entries batch)
           for index from 0
           unless (aref (forj-tools-batch-results batch) index)
           do (aset (forj-tools-batch-results batch) index
                    (list :id (or (plist-get (plist-get entry :call) :id) (plist-get entry :id) "")
                          :name (or (plist-get (plist-get entry :call) :name) "")
                          :ok :false
                          :error (list :type (or (plist-get err :type) "internal-error")
                                       :message (or (plist-get err :message) "the batch failed")
                                       :details nil
                                       :recovery (vconcat (or (plist-get err :recovery)
                                                              '("Try again")))))))
  (forj-tools--finish batch))

(defun forj-tools--finish (batch)
  "Fill in results for unparsable entries of BATCH, draw, and report."
  (cl-loop for entry in (forj-tools-batch-entries batch)
           for index from 0
           when (and (plist-get entry :error) (plist-get entry :refused))
           do (aset (forj-tools-batch-results batch) index
                    (list :id (or (plist-get entry :id) (format "#%d" (1+ index)))
                          :name (or (plist-get (plist-get entry :refused) :name) "")
                          :ok :false
                          :error (list :type "permission-error"
                                       :message (plist-get entry :error)
                                       :details (list :kind "RefusedInEmacs")
                                       :recovery (vconcat (plist-get entry :recovery)))))
           else when (plist-get entry :error)
           do (aset (forj-tools-batch-results batch) index
                    (list :id (or (plist-get entry :id) (format "#%d" (1+ index)))
                          :name ""
                          :ok :false
                          :error (list :type "validation-error"
                                       :message (plist-get entry :error)
                                       :details (list :kind "BadArgs")
                                       :recovery ["Write each call as one JSON object in its own ```tool-call block, with \"id\", \"name\" and \"args\""])))
           else when (plist-get entry :saved)
           do (aset (forj-tools-batch-results batch) index
                    (forj-tools--saved-first entry (aref (forj-tools-batch-results batch) index))))
  (cl-loop for index below (length (forj-tools-batch-states batch))
           do (aset (forj-tools-batch-states batch) index 'done))
  (cl-loop for result across (forj-tools-batch-results batch)
           for took across (forj-tools-batch-times batch)
           when (and result (integerp took))
           do (puthash result took forj-tools--took))
  (cl-loop for shell across (forj-tools-batch-shells batch)
           for result across (forj-tools-batch-results batch)
           when shell do (forj-shell-finish shell result))
  (forj-tools--spin batch nil)
  (when (forj-tools-batch-batch-id batch)
    (remhash (forj-tools-batch-batch-id batch) forj-tools--batches))
  (forj-tools--render batch)
  (when (buffer-live-p (forj-tools-batch-buffer batch))
    (with-current-buffer (forj-tools-batch-buffer batch)
      (when (eq forj-tools-current-batch batch) (setq forj-tools-current-batch nil))))
  (forj-tools--revert-changed-buffers batch)
  (forj-tools--run-after-batch batch)
  (when (forj-tools-batch-callback batch)
    (funcall (forj-tools-batch-callback batch)
             (append (forj-tools-batch-results batch) nil))))

(defvar forj-tools-after-batch-functions nil
  "Hook run after a batch's results are drawn: each function gets its calls.
Each is called with two arguments: a list with one (CALL . RESULT)
pair per entry of the batch, in order (CALL is nil for a block that
could not be parsed; RESULT is the worker's result plist), and the
project root (a directory name), or nil when the batch had no worker.
A function that signals an error is reported in a message; the batch
and the other functions go on.")

(defun forj-tools--run-after-batch (batch)
  "Give each of `forj-tools-after-batch-functions' the results of BATCH."
  (when forj-tools-after-batch-functions
    (let ((pairs (cl-loop for entry in (forj-tools-batch-entries batch)
                          for result across (forj-tools-batch-results batch)
                          collect (cons (plist-get entry :call) result)))
          (root (and (forj-tools-batch-worker batch)
                     (plist-get (forj-worker-hello (forj-tools-batch-worker batch)) :root))))
      (dolist (fn forj-tools-after-batch-functions)
        (condition-case err
            (funcall fn pairs root)
          (error (message "forj: %s failed after a batch: %s"
                          fn (error-message-string err))))))))

(defun forj-tools--revert-changed-buffers (batch)
  "Revert the buffers visiting every file BATCH wrote, keeping point.
Every file of every result counts: a multi_edit's, an edit the user
modified.  With `forj-git-auto-stage' the files are staged too."
  (let ((root (and (forj-tools-batch-worker batch)
                   (plist-get (forj-worker-hello (forj-tools-batch-worker batch)) :root))))
    (when root
      (forj-files-applied root (forj-files-changed-by-results (forj-tools-batch-results batch))))))

;;; Commands

;;;###autoload
(defun forj-tools-run ()
  "Run the tool-call blocks of the region, or those after the last results.
Without an active region, the batch is every block after the last
tool-result block of the buffer (or from its start): the calls not yet
run."
  (interactive)
  (if (use-region-p)
      (forj-tools-run-region (region-beginning) (region-end))
    (let ((from (save-excursion
                  (goto-char (point-max))
                  (if (re-search-backward "^```tool-result$" nil t)
                      (progn (re-search-forward "^```$" nil t) (point))
                    (point-min)))))
      (forj-tools-run-region from (point-max)))))

;;;###autoload
(defun forj-cancel ()
  "Cancel the batch running in this buffer: the running call and all later ones."
  (interactive)
  (let ((batch forj-tools-current-batch))
    (if (not (and batch (forj-tools-batch-batch-id batch) (forj-tools-batch-worker batch)))
        (message "forj: nothing to cancel here")
      (forj-epc-call (forj-worker-connection (forj-tools-batch-worker batch)) "cancel"
                     (list :batch_id (forj-tools-batch-batch-id batch))
                     :success (lambda (_) (message "forj: cancelled"))))))

(defvar forj-tools-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-t") #'forj-tools-run)
    (define-key map (kbd "C-c C-k") #'forj-cancel)
    (define-key map (kbd "C-c C-o") #'forj-tools-toggle-fold)
    map)
  "Keymap of `forj-tools-mode'.")

;;;###autoload
(define-minor-mode forj-tools-mode
  "Run fenced tool-call blocks of any buffer through the forj worker.

\\{forj-tools-mode-map}"
  :lighter " forj-tools"
  :keymap forj-tools-mode-map
  :group 'forj
  (forj-tools-keep-worker forj-tools-mode))

(defvar-local forj-tools--keeps-worker nil
  "Non-nil in a buffer that keeps its project's worker running.")

(defun forj-tools-keep-worker (on)
  "Make the current buffer keep its project's worker running while it lives, if ON.
The worker stops when the last such buffer of its project is killed."
  (setq forj-tools--keeps-worker on)
  (if on
      (add-hook 'kill-buffer-hook #'forj-tools--last-buffer-check nil t)
    (remove-hook 'kill-buffer-hook #'forj-tools--last-buffer-check t)))

(defun forj-tools--last-buffer-check ()
  "Stop this buffer's worker when no other forj buffer of its project is left."
  (let ((root forj-tools-root)
        (this (current-buffer)))
    (when (and root
               (not (cl-some (lambda (buffer)
                               (and (not (eq buffer this))
                                    (buffer-local-value 'forj-tools--keeps-worker buffer)
                                    (equal (buffer-local-value 'forj-tools-root buffer) root)))
                             (buffer-list))))
      (forj-worker-stop root))))

;;; Rendering

(defun forj-tools--header (entry state result)
  "The one-line header of ENTRY in STATE with RESULT."
  (let* ((call (or (plist-get entry :call) (plist-get entry :refused)))
         (name (or (plist-get call :name) "?"))
         (args (plist-get call :args))
         (main (or (plist-get args :path) (plist-get args :query) (plist-get args :directory)
                   (let ((patterns (plist-get args :patterns)))
                     (and (vectorp patterns) (> (length patterns) 0) (aref patterns 0)))
                   ""))
         (mark (pcase state
                 ('pending "…")
                 ('manual "⏸")
                 ('running (propertize (forj-tools--spinner-frame) 'forj-tools-spinner t))
                 (_ (cond ((eq (plist-get result :ok) t) "✓")
                          ((member (plist-get (plist-get result :error) :type)
                                   '("permission-error" "cancelled"))
                           (format "⊘ %s" (plist-get (plist-get result :error) :message)))
                          (t (format "✗ %s" (plist-get (plist-get result :error) :message))))))))
    ;; One line, whatever the model put in a path or a message: a newline
    ;; here could forge a role heading in a chat.
    (forj-review-mark-invisible
     (replace-regexp-in-string "[\n\r]+" " " (concat (format "%s %s %s" mark name main)
                                                     (forj-tools--command-tags result))))))

(defun forj-tools-header-text (entry result)
  "The header line of the parsed ENTRY once it has RESULT, as plain text.
It is what a tool-result block follows in a transcript; it ends with
how long the call took, in brackets, when that is known, so a chat
drawn again from its record shows it (see `forj-tools-header-took')."
  (let ((took (and result (gethash result forj-tools--took))))
    (concat (substring-no-properties (forj-tools--header entry 'done result))
            (if took (format " [%d ms]" took) ""))))

(defun forj-tools-header-took (line)
  "Return the milliseconds the transcript header LINE gives its call, or nil."
  (and (stringp line)
       (string-match " \\[\\([0-9]+\\) ms\\]\\'" line)
       (string-to-number (match-string 1 line))))

(defun forj-tools--command-tags (result)
  "Tags for a command RESULT that ran with network or without the sandbox.
The worker reports `sandbox' (\"bwrap\", \"read-only\" or \"none\") and
`network' in a command's result, or in its error's details."
  (let* ((fields (or (plist-get result :result)
                     (plist-get (plist-get result :error) :details)))
         (fields (and (listp fields) (keywordp (car-safe fields)) fields))
         (tags (concat (and (eq (plist-get fields :network) t) " [network on]")
                       (and (equal (plist-get fields :sandbox) "none") " [unsandboxed]"))))
    (if (string-empty-p tags)
        ""
      (propertize tags 'face 'forj-review-warning 'font-lock-face 'forj-review-warning))))

(define-button-type 'forj-tools-path
  'action #'forj-tools--visit
  'help-echo "Visit this file")

(defun forj-tools--visit (button)
  "Open the file of BUTTON, at its line if it has one."
  (let ((file (button-get button 'forj-file))
        (line (button-get button 'forj-line)))
    (find-file-other-window file)
    (when line
      (goto-char (point-min))
      (forward-line (1- line)))))

(defun forj-tools--path-button (beg end file line)
  "Make BEG..END a button visiting FILE at LINE (nil for none)."
  (make-text-button beg end 'type 'forj-tools-path 'forj-file file 'forj-line line))

(defun forj-tools--existing-file (path root cache)
  "PATH under ROOT as an absolute file name if it is a regular file, else nil.
CACHE, a hash table, remembers answers for one rendering."
  (let ((known (gethash path cache 'unknown)))
    (if (not (eq known 'unknown))
        known
      (puthash path
               ;; A path the worker printed names a file on its host:
               ;; under a remote root never a local file of that name.
               (let ((file (forj-project-file path root)))
                 (and file (not (file-remote-p file)) (file-regular-p file) file))
               cache))))

(defun forj-tools--buttonize (from to root cache)
  "Make the paths of existing files between FROM and TO buttons.
Paths are relative to ROOT; CACHE remembers which exist.  A path
followed by :LINE opens at that line."
  (when root
    (save-excursion
      (goto-char from)
      (while (re-search-forward "\\([[:alnum:]_.][[:alnum:]_./-]*\\)\\(?::\\([0-9]+\\)\\)?" to t)
        (let* ((path (match-string-no-properties 1))
               (file (and (string-match-p "[./]" path)
                          (forj-tools--existing-file path root cache))))
          (when file
            (forj-tools--path-button (match-beginning 0) (match-end 0) file
                                     (and (match-beginning 2)
                                          (string-to-number (match-string 2))))))))))

(defun forj-tools--buttonize-result (from to root cache)
  "Make the paths in the tool-result JSON between FROM and TO buttons.
A \"path\" member followed by a \"line\" member (search matches) opens
at that line; PATH:LINE inside any string does too.  ROOT and CACHE
are as for `forj-tools--buttonize'.  Only the first
`forj-tools-button-scan-chars' characters are scanned."
  (when root
    (let ((to (min to (+ from forj-tools-button-scan-chars))))
      (save-excursion
        (goto-char from)
        (while (re-search-forward
                "\"path\":\"\\([^\"\\\n]+\\)\"\\(?:,\"line\":\\([0-9]+\\)\\)?" to t)
          (let ((file (forj-tools--existing-file (match-string-no-properties 1) root cache)))
            (when file
              (forj-tools--path-button (match-beginning 1) (match-end 1) file
                                       (and (match-beginning 2)
                                            (string-to-number (match-string 2)))))))
        (goto-char from)
        ;; path:line as compilers, linters and grep print it.
        (while (re-search-forward
                "\\(?:^\\|[\" (]\\|\\\\n\\)\\([[:alnum:]_.][[:alnum:]_./-]*\\):\\([0-9]+\\)" to t)
          (let ((file (and (not (button-at (match-beginning 1)))
                           (forj-tools--existing-file (match-string-no-properties 1) root cache))))
            (when file
              (forj-tools--path-button (match-beginning 1) (match-end 2) file
                                       (string-to-number (match-string 2))))))))))

(defun forj-tools--render (batch)
  "Redraw BATCH's headers and results, in the buffer's `forj-tools-result-style'."
  (let ((buffer (forj-tools-batch-buffer batch)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (if (eq forj-tools-result-style 'rendered)
            (forj-tools--render-for-people batch)
          (forj-tools--render-raw batch))
        (when forj-tools-after-render-function
          (funcall forj-tools-after-render-function
                   (marker-position (forj-tools-batch-start batch))
                   (marker-position (forj-tools-batch-end batch))))))))

(defun forj-tools--batch-root (batch)
  "The project root of BATCH's worker, once it is known."
  (and (forj-tools-batch-worker batch)
       (plist-get (forj-worker-hello (forj-tools-batch-worker batch)) :root)))

(defun forj-tools--shell-button (shell)
  "Insert the [output] button of the output buffer SHELL, if it lives."
  (when (buffer-live-p shell)
    (insert " ")
    (insert-text-button "[output]" 'action (lambda (_) (pop-to-buffer shell))
                        'help-echo (format "Show %s" (buffer-name shell))
                        'follow-link t)))

(defun forj-tools-insert-result (call result &optional state took shell root)
  "Insert at point the header and body of CALL's RESULT, drawn for people.
CALL is the parsed call (nil for a block that was not one).  STATE is
`pending', `manual', `running' or `done' (the default).  TOOK is how
many milliseconds the call took, if known; SHELL its live output
buffer, if any; ROOT the project root, for links.  The text carries
`forj-raw', the exact JSON the model receives, and folds when long."
  (let* ((name (or (plist-get call :name) (plist-get result :name) ""))
         (name (if (string-empty-p name) "(invalid call)" name))
         (args (plist-get call :args))
         (raw (and result (forj-tools-json-encode result)))
         (from (point))
         (fold nil))
    (insert (forj-render-header name args (or state 'done) result raw (and (integerp took) took)))
    (when (and (listp args) (keywordp (car-safe args)))
      (forj-render-header-links from (point) (plist-get args :path)
                                (plist-get args :start_line) root))
    (forj-tools--shell-button shell)
    (insert "\n")
    (when result
      (setq fold (forj-render-body-folded name result root args)))
    (add-text-properties from (point)
                         (list 'forj-raw raw 'forj-raw-kind "result"
                               'forj-render-fold-overlay fold
                               'forj-rendered t))))

(defun forj-tools--render-for-people (batch)
  "Redraw BATCH's results as headers and bodies drawn for their kind."
  (let ((inhibit-read-only t)
        (root (forj-tools--batch-root batch)))
    (save-excursion
      (delete-region (forj-tools-batch-start batch) (forj-tools-batch-end batch))
      (goto-char (forj-tools-batch-start batch))
      (cl-loop for entry in (forj-tools-batch-entries batch)
               for index from 0
               do (forj-tools-insert-result (or (plist-get entry :call) (plist-get entry :refused))
                                            (aref (forj-tools-batch-results batch) index)
                                            (aref (forj-tools-batch-states batch) index)
                                            (aref (forj-tools-batch-times batch) index)
                                            (aref (forj-tools-batch-shells batch) index)
                                            root))
      (set-marker (forj-tools-batch-end batch) (point)))))

(defun forj-tools--render-raw (batch)
  "Redraw BATCH's headers and tool-result blocks with the worker's JSON."
  (let ((buffer (forj-tools-batch-buffer batch)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let ((inhibit-read-only t)
              (root (and (forj-tools-batch-worker batch)
                         (plist-get (forj-worker-hello (forj-tools-batch-worker batch)) :root)))
              (cache (make-hash-table :test #'equal)))
          (save-excursion
            (remove-overlays (forj-tools-batch-start batch) (forj-tools-batch-end batch)
                             'forj-tools-fold t)
            (delete-region (forj-tools-batch-start batch) (forj-tools-batch-end batch))
            (goto-char (forj-tools-batch-start batch))
            (cl-loop for entry in (forj-tools-batch-entries batch)
                     for index from 0
                     for state = (aref (forj-tools-batch-states batch) index)
                     for result = (aref (forj-tools-batch-results batch) index)
                     do (let ((from (point))
                              (shell (and (forj-tools-batch-shells batch)
                                          (aref (forj-tools-batch-shells batch) index))))
                          (insert (forj-tools--header entry state result))
                          (forj-tools--buttonize from (point) root cache)
                          (when (buffer-live-p shell)
                            (insert " ")
                            (insert-text-button "[output]" 'action (lambda (_) (forj-shell-display shell))
                                                'help-echo (format "Show %s" (buffer-name shell))
                                                'follow-link t))
                          (insert "\n"))
                     when result
                     do (let ((from (point)))
                          (insert "```tool-result\n" (forj-tools-json-encode result) "\n```\n")
                          (forj-tools--buttonize-result from (point) root cache)
                          (forj-tools--fold from (point))))
            (set-marker (forj-tools-batch-end batch) (point))))))))

;;; Folding

(defconst forj-tools--fold-shown 240
  "How many characters of a folded result stay visible.")

(defvar forj-tools-fold-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "TAB") #'forj-tools-toggle-fold)
    (define-key map (kbd "<mouse-2>") #'forj-tools-toggle-fold)
    map)
  "Keymap on the visible start of a folded result.")

(defun forj-tools--fold (from to)
  "Fold the result block between FROM and TO if it is long; the text stays.
The fence line and the start of the JSON stay visible; the rest is
hidden up to the closing fence."
  (let* ((body (save-excursion (goto-char from) (line-beginning-position 2)))
         (close (save-excursion (goto-char to) (line-beginning-position 0)))
         (hide-from (+ body forj-tools--fold-shown)))
    (when (and (> (- close body) forj-tools-fold-chars) (< hide-from (1- close)))
      (let ((fold (make-overlay hide-from (1- close)))
            (handle (make-overlay from hide-from)))
        (overlay-put fold 'forj-tools-fold t)
        (overlay-put fold 'invisible t)
        (overlay-put fold 'evaporate t)
        (overlay-put fold 'forj-tools-fold-label
                     (propertize (format " … [%s more; TAB shows it]"
                                         (file-size-human-readable (- close 1 hide-from)))
                                 'face 'shadow))
        (overlay-put fold 'before-string (overlay-get fold 'forj-tools-fold-label))
        (overlay-put handle 'forj-tools-fold t)
        (overlay-put handle 'evaporate t)
        (overlay-put handle 'keymap forj-tools-fold-map)
        (overlay-put handle 'forj-tools-fold-body fold)
        (overlay-put handle 'help-echo "TAB: show or hide the whole result")))))

(defun forj-tools-toggle-fold ()
  "Show or hide the rest of the folded result at point."
  (interactive)
  (let ((fold (cl-some (lambda (o) (overlay-get o 'forj-tools-fold-body))
                       (overlays-in (line-beginning-position) (min (point-max) (1+ (line-end-position)))))))
    (if (not fold)
        ;; A result drawn for people folds its own way.
        (unless (forj-render-toggle-fold)
          (message "forj: no folded result here"))
      (let ((hidden (overlay-get fold 'invisible)))
        (overlay-put fold 'invisible (not hidden))
        (overlay-put fold 'before-string
                     (and (not hidden) (overlay-get fold 'forj-tools-fold-label)))))))

(provide 'forj-tools)
;;; forj-tools.el ends here
