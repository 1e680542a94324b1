;;; forj-loop.el --- The tool loop: send, stream, run the batch, resume  -*- lexical-binding: t; -*-

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

;; The loop of a chat, on its session (forj-session.el): a user
;; message starts a turn; the model's reply streams into the session;
;; the tool-call blocks of a complete reply run as one batch through
;; forj-tools.el, and the model is resumed with their results, at most
;; `forj-chat-max-tool-iterations' times per user message.  It also
;; retries, continues after a cut or a limit, stops, and compacts the
;; conversation before a request when it is due (forj-compact.el).
;;
;; The loop draws nothing: it changes the session and tells the
;; session's view what happened (`forj-session-view'), so it runs in a
;; buffer with no window, or with no view at all.  forj-chat.el is the
;; view people use.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-session)
(require 'forj-worker)
(require 'forj-epc)
(require 'forj-tools)
(require 'forj-provider)
(require 'forj-usage)
(require 'forj-context)
(require 'forj-compact)
(require 'forj-window)
(require 'forj-hooks)
(require 'forj-diagnostics)
(require 'forj-notify)
(require 'forj-instructions)
(require 'forj-commands)

;;; Options

(defcustom forj-chat-max-tool-iterations nil
  "How many tool batches one user message may lead to; nil: the worker's config.
nil follows max_tool_iterations_per_user_turn in the [tools] section
of forj's configuration (4 unless set).  Past the limit, new calls are
answered that the limit is reached, the model is asked once more to
answer without tools, and `forj-continue' lets it go on."
  :type '(choice (const :tag "As the worker's configuration says" nil)
                 (natnum :tag "Batches"))
  :group 'forj)

(defcustom forj-chat-context-bytes nil
  "The model's context, in bytes of text; nil: from its context window.
Tool results are cut to fit what is left of it; nil sizes them from
the window `forj-usage-context-window' gives for the chat's model
\(`forj-loop-result-budget')."
  :type '(choice (const :tag "From the model's context window" nil)
                 (natnum :tag "Bytes"))
  :group 'forj)

(defcustom forj-chat-tool-set 'core
  "Which tools a chat offers the model before it asks for more.
`core': reading, listing, search, the edit tools, run_shell, run_tests
and todo_write, and load_tools, which the model calls to add a family,
git, files, ast, tasks, web or checks, from its next step on; a call to
a tool of a family not loaded runs, and loads its family.  The core
set's schemas fit a small local model's window.  `all': every tool
from the first request on."
  :type '(choice (const :tag "The core set; the model loads the rest" core)
                 (const :tag "Every tool" all))
  :group 'forj)

(defvar forj-chat-worker-ready-functions nil
  "Called with the worker in a chat buffer each time its worker is ready.")

(defvar forj-chat-batch-interrupted-function nil
  "Called with the entries, results and batch whose worker died, or nil.
It takes over the turn: the results are not recorded, and the model is
not resumed, until the interrupted batch is resolved.")

;;; The worker and its tools

(defun forj-loop-load-tools (worker &optional then)
  "Take this chat's tools from WORKER for its permission mode, then call THEN.
The tools are those `tool_definitions' gives for the chat's mode (the
configured mode's, in hello, when the chat has none of its own), so a
read-only chat never shows the model a tool that writes."
  (let ((buffer (current-buffer))
        (turn (forj-session-turn forj-session))
        (hello (forj-worker-hello worker)))
    (if (and (null forj-tools-permission-mode) (eq forj-chat-tool-set 'all))
        (progn
          (setf (forj-session-tools forj-session) (plist-get hello :tools)
                (forj-session-permission-instructions forj-session)
                (append (plist-get (plist-get hello :permissions) :instructions) nil))
          (when then (funcall then)))
      (forj-epc-call
       (forj-worker-connection worker) "tool_definitions"
       (append (and forj-tools-permission-mode (list :permission_mode forj-tools-permission-mode))
               (and (not (eq forj-chat-tool-set 'all))
                    (list :families (vconcat (forj-session-families forj-session)))))
       :success (lambda (reply)
                  (when (buffer-live-p buffer)
                    (with-current-buffer buffer
                      (forj-loop--take-tools reply)
                      (when (and then (= turn (forj-session-turn forj-session))) (funcall then)))))
       :error (lambda (err)
                (when (buffer-live-p buffer)
                  (with-current-buffer buffer
                    (forj-session-notice (format "the worker could not list the tools of mode %s: %s"
                                                 (or forj-tools-permission-mode "default")
                                                 (or (plist-get err :message) err)))
                    (when (and then (= turn (forj-session-turn forj-session))) (forj-loop-end-turn)))))))))

(defun forj-loop--take-tools (reply)
  "Use the tools of a `tool_definitions' REPLY from now on; show its mode note."
  (setf (forj-session-tools forj-session) (plist-get reply :tools)
        (forj-session-family-index forj-session) (plist-get reply :families)
        (forj-session-permission-instructions forj-session) (append (plist-get reply :instructions) nil))
  (let ((mode (plist-get reply :permission_mode)))
    ;; A chat with no mode of its own keeps following the configured one.
    (when (and forj-tools-permission-mode (stringp mode) (not (equal mode forj-tools-permission-mode)))
      (setq forj-tools-permission-mode mode)))
  (when (stringp (plist-get reply :mode_note))
    (forj-session-notice (plist-get reply :mode_note)))
  (force-mode-line-update))

(defun forj-loop--families-to-load (entries)
  "The families the tool-call ENTRIES of a batch load, not loaded yet.
A load_tools call loads its family; a call to a tool the chat did not
offer loads the family the worker says it is in."
  (let ((index (forj-session-family-index forj-session))
        (offered (mapcar (lambda (tool) (plist-get tool :name))
                         (append (forj-session-tools forj-session) nil)))
        (found nil))
    (dolist (entry entries)
      (let* ((call (plist-get entry :call))
             (name (plist-get call :name))
             (family
              (if (equal name "load_tools")
                  (let ((family (plist-get (plist-get call :args) :family)))
                    (and (stringp family) (plist-member index (intern (concat ":" family)))
                         family))
                (and (stringp name) (not (member name offered))
                     (cl-loop for (key tools) on index by #'cddr
                              when (seq-contains-p tools name)
                              return (substring (symbol-name key) 1))))))
        (when (and family (not (member family (forj-session-families forj-session))))
          (cl-pushnew family found :test #'equal))))
    (nreverse found)))

(defun forj-loop-start-worker ()
  "Start the chat's worker now, for the first screen to tell how commands run."
  (let ((buffer (current-buffer)))
    (forj-worker-ensure
     (forj-session-root forj-session)
     (lambda (worker)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer (forj-loop-worker-ready worker))))
     (lambda (err)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (forj-session-notice (format "the tool worker could not start: %s"
                                        (or (plist-get err :message) err)))
           (force-mode-line-update)))))))

(defun forj-loop-worker-ready (worker)
  "Show WORKER's hello warnings as notices, once per worker start."
  (unless (eq (forj-session-greeted forj-session) worker)
    (setf (forj-session-greeted forj-session) worker)
    (dolist (warning (append (plist-get (forj-worker-hello worker) :warnings) nil))
      (when (stringp warning) (forj-session-notice warning)))
    (run-hook-with-args 'forj-chat-worker-ready-functions worker))
  (force-mode-line-update))

;;; Sending

(defun forj-loop-messages (&optional record)
  "The conversation as provider-neutral messages, read from RECORD.
RECORD defaults to the chat's record.  The context the user added
comes first; a summary replaces what it summarises
\(`forj-compact-messages')."
  (forj-context-messages (forj-compact-messages (forj-session-messages-of record))))

(defun forj-loop-check-provider ()
  "Signal a `user-error' saying what to do when this chat cannot ask a model."
  (unless (forj-session-provider forj-session)
    (user-error "No language model yet: M-x forj-setup configures one (M-x forj-demo needs none)"))
  (unless (or (plist-get (forj-session-provider forj-session) :model)
              (eq (plist-get (forj-session-provider forj-session) :family) 'scripted))
    (user-error "The provider %s has no model yet: choose one with M-x forj-set-model"
                (plist-get (forj-session-provider forj-session) :name))))

(defun forj-loop-confirm-root ()
  "Make sure the user chose this chat's project root, or signal a `user-error'."
  (unless (or (forj-session-root-confirmed forj-session)
              (yes-or-no-p (format "This chat file names the project %s; let the model work there? "
                                   (forj-session-root forj-session))))
    (user-error "Not sent; open a chat on your project with M-x forj"))
  (setf (forj-session-root-confirmed forj-session) t))

(defvar forj-loop--to-end nil
  "Non-nil while a turn that may run tools until it is done is started.")

(defun forj-loop-start-turn (text draft)
  "Start a turn: add TEXT as the user's message (unless nil), ask the model.
DRAFT is what the input holds afterwards.  A turn starts with each
user message, `forj-continue' and `forj-retry': the tool batches are
counted again from zero."
  (cl-incf (forj-session-turn forj-session))
  (setf (forj-session-iterations forj-session) 0
        (forj-session-unbounded forj-session) forj-loop--to-end
        (forj-session-capped forj-session) nil
        (forj-session-cancelled forj-session) nil
        (forj-session-continuation forj-session) nil)
  ;; The worker groups checkpoints and turn-scoped rules by this id.
  (setf (forj-session-turn-id forj-session) (forj-session-new-turn-id))
  (when text
    (let ((entry (forj-session-record-add-user
                  (concat "\n## User\n\n"
                          (replace-regexp-in-string "[ \t\n]+\\'" "" (forj-session-escape text))
                          "\n\n")
                  (forj-session-turn-id forj-session))))
      (forj-session-view 'user-message entry draft)))
  ;; The window sizes the request and its results: asked first of a
  ;; local server that says it.
  (let ((buffer (current-buffer))
        (turn (forj-session-turn forj-session)))
    (setf (forj-session-state forj-session) 'streaming)
    (forj-window-learn (forj-session-provider forj-session)
                       (lambda ()
                         (when (buffer-live-p buffer)
                           (with-current-buffer buffer
                             (when (= turn (forj-session-turn forj-session))
                               (forj-loop-with-worker #'forj-loop-request))))))))

(defun forj-loop-with-worker (then)
  "Start the project's worker if needed, learn its tools, then call THEN."
  (let ((buffer (current-buffer))
        (turn (forj-session-turn forj-session)))
    (setf (forj-session-state forj-session) 'streaming)
    (forj-worker-ensure
     (forj-session-root forj-session)
     (lambda (worker)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (forj-loop-worker-ready worker)
           (when (= turn (forj-session-turn forj-session))
             (forj-loop-load-tools worker then)))))
     (lambda (err)
       (when (and (buffer-live-p buffer)
                  (= turn (forj-session-turn (buffer-local-value 'forj-session buffer))))
         (with-current-buffer buffer
           (forj-session-notice (format "the tool worker could not start: %s"
                                        (or (plist-get err :message) err)))
           (forj-loop-end-turn (list :kind 'failed))))))))

;;; The reply

(defun forj-loop-request ()
  "Start the model's next reply, compacting the conversation first if it is due."
  (unless (forj-compact-before-request #'forj-loop-request)
    (forj-loop--request-now)))

(defun forj-loop-result-budget ()
  "The bytes a batch's results may take: what is left of the model's window.
The window less the tokens of the request so far, a reserve for the
reply (the provider's :max-tokens, at most a quarter of the window)
and a margin of 5%, at 4 bytes a token; never less than 4 KiB, so a
result always says something.  With
`forj-chat-context-bytes' set, that size less the transcript's bytes."
  ;; Seed 000's FR-REG-04b: capacity computed conservatively.
  (if forj-chat-context-bytes
      ;; What the model has read so far, heading of these results and
      ;; prompt included, as the transcript would hold it.
      (max 4096 (- forj-chat-context-bytes
                   (+ (length (forj-session-transcript))
                      (length "\n## Tool results\n\n")
                      (length "\n## User\n\n")
                      (length (forj-session-draft)))))
    (let* ((provider (forj-session-provider forj-session))
           (window (forj-usage-context-window provider))
           (reserve (min (or (plist-get provider :max-tokens) 4096) (/ window 4)))
           (margin (/ window 20)))
      (max 4096 (* 4 (max 0 (- window (car (forj-compact-estimate)) reserve margin)))))))

(defun forj-loop--does-not-fit ()
  "Why the next request cannot fit the model's context window, or nil if it can.
The sentence says what the request holds and what the user may drop."
  (let* ((provider (forj-session-provider forj-session))
         (window (forj-usage-context-window provider))
         (estimate (car (forj-compact-estimate))))
    (when (and (> estimate window) (not (eq (plist-get provider :family) 'scripted)))
      (let* ((parts (forj-compact-parts))
             (tokens (lambda (key) (forj-usage-format-tokens
                                    (forj-usage-tokens-of-bytes (plist-get parts key)))))
             (drops (delq nil
                          (list (and (> (plist-get parts :context) 0)
                                     "context you added (M-x forj-context-remove)")
                                (and (> (forj-compact-summarisable
                                         (length (forj-session-record forj-session)))
                                        1)
                                     "the conversation (M-x forj-compact summarises it)")
                                (and (eq forj-chat-tool-set 'all)
                                     "tools (set forj-chat-tool-set to core)")
                                (and (forj-session-families forj-session)
                                     "loaded tool families (a new chat offers the core set)")
                                "or use a model with a larger window (:context-window in forj-providers, if the server has more)"))))
        (format "not sent: this request holds about %s tokens, more than the %s-token context window of %s (tool definitions %s, system prompt %s, added context %s, conversation %s).  Drop some: %s"
                (forj-usage-format-tokens estimate) (forj-usage-format-tokens window)
                (or (plist-get provider :model) (plist-get provider :name) "the model")
                (funcall tokens :tools) (funcall tokens :system)
                (funcall tokens :context) (funcall tokens :conversation)
                (mapconcat #'identity drops "; "))))))

(defun forj-loop--request-now ()
  "Start the model's next reply under a new \"## Assistant\" heading.
A request that cannot fit the model's window is not sent: the user is
told what it holds and what to drop."
  (let ((too-big (forj-loop--does-not-fit)))
    (if too-big
        (progn (forj-session-notice too-big)
               (forj-loop-end-turn (list :kind 'failed)))
      (forj-loop--send-request))))

(defun forj-loop--send-request ()
  "Send the request for the model's next reply."
  (forj-instructions-note (forj-session-root forj-session) (forj-session-record forj-session)
                          #'forj-session-notice)
  (let ((buffer (current-buffer))
        (messages (forj-loop-messages)))
    (setf (forj-session-stop-info forj-session) nil)
    (forj-session-view 'reply-start)
    (setf (forj-session-reply forj-session) ""
          (forj-session-state forj-session) 'streaming)
    (force-mode-line-update)
    (setf (forj-session-stream forj-session)
          (forj-provider-start
           (forj-session-provider forj-session) (forj-session-system-prompt) messages
           (and (not (eq (forj-session-effective-tools-mode) 'disabled))
                (append (forj-session-tools forj-session) nil))
           (list :on-text (lambda (text)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-loop--reply-text text))))
                 :on-stop (lambda (info)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (setf (forj-session-stop-info forj-session) info))))
                 :on-wait (lambda (seconds attempt message)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer
                                (forj-session-view 'wait seconds attempt message))))
                 :on-call (lambda (call)
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-loop--insert-call call))))
                 :on-usage (forj-usage-recorder buffer (forj-session-provider forj-session))
                 :on-done (lambda ()
                            (when (buffer-live-p buffer)
                              (with-current-buffer buffer (forj-loop--reply-done))))
                 :on-error (lambda (message)
                             (when (buffer-live-p buffer)
                               (with-current-buffer buffer
                                 (forj-loop--reply-failed message)))))))))

(defun forj-loop--reply-text (text)
  "Add TEXT, streamed by the model, to the reply and show it."
  (forj-session-view 'wait-over)
  (when (forj-session-reply forj-session)
    (setf (forj-session-reply forj-session) (concat (forj-session-reply forj-session) text))
    (forj-session-view 'reply-text text)))

(defun forj-loop--insert-call (call)
  "Write a native CALL as a tool-call block, to keep it in the record."
  (when (forj-session-reply forj-session)
    (forj-loop--reply-text
     (concat (let ((reply (forj-session-reply forj-session)))
               (if (or (string-empty-p reply) (string-suffix-p "\n" reply)) "" "\n"))
             "\n```tool-call\n"
             (forj-tools-json-encode
              (append (list :id (forj-loop--fresh-id (plist-get call :id))
                            :name (or (plist-get call :name) "")
                            :args (plist-get call :args))
                      ;; What the provider needs back with the call (a
                      ;; signature, thinking blocks) rides in the block.
                      (and (plist-get call :native) (list :native (plist-get call :native)))))
             "\n```\n"))))

(defun forj-loop--fresh-id (id)
  "ID, or a new id when it is empty or already in the conversation.
A server may number its calls from zero in every reply; ids must stay
unique for a call and its result to match."
  (if (and (stringp id) (not (string-empty-p id))
           (not (string-match-p (concat "\"id\"[ \t]*:[ \t]*" (regexp-quote (json-serialize id)))
                                (concat (forj-session-transcript) (forj-session-reply forj-session)))))
      id
    (forj-provider-new-id "call")))

(defun forj-loop--finish-reply ()
  "Record the reply just streamed and draw it for reading.
Headings in it are escaped; it ends with a newline."
  (let* ((reply (forj-session-escape (forj-session-reply forj-session)))
         (reply (if (or (string-empty-p reply) (string-suffix-p "\n" reply)) reply (concat reply "\n")))
         (entry (forj-session-record-add "assistant" (concat "## Assistant\n\n" reply))))
    (forj-session-view 'reply-end entry)
    (setf (forj-session-reply forj-session) nil
          (forj-session-stream forj-session) nil)
    (forj-session-flush-notices)
    entry))

(defun forj-loop--reply-failed (message)
  "The reply ended in MESSAGE: keep the text, say what happened, end the turn."
  (let* ((entry (and (forj-session-reply forj-session) (forj-loop--finish-reply)))
         (said (and entry (not (string-blank-p
                                (cdr (forj-session-split-heading (plist-get entry :text))))))))
    (forj-session-notice
     (concat message
             (if said "  (the text so far is kept)" "")
             (substitute-command-keys
              "  \\<forj-chat-mode-map>\\[forj-continue] (M-x forj-continue) tries again")))
    (forj-loop-end-turn
     (if said
         (list :kind 'failed
               :text (format "Your last reply was interrupted (%s).  Go on from where it stopped."
                             message))
       (list :kind 'failed)))))

(defun forj-loop--reply-done ()
  "Finish a complete reply: run the tool-call blocks in it, or end the turn.
A reply cut by the token limit or refused runs none of its calls."
  (let* ((stop (forj-session-stop-info forj-session))
         (entry (forj-loop--finish-reply))
         (calls (forj-session-entry-calls entry)))
    (setf (forj-session-stop-info forj-session) nil)
    (cond
     ((eq (plist-get stop :kind) 'length) (forj-loop--reply-cut stop calls))
     ((eq (plist-get stop :kind) 'refusal) (forj-loop--reply-refused stop calls))
     ((and (eq (plist-get stop :kind) 'pause) (null calls)) (forj-loop--reply-paused stop))
     ((null calls) (forj-loop--turn-done))
     ((forj-loop--at-limit-p) (forj-loop--refuse-batch calls))
     (t (forj-loop--run-batch calls)))))

;;; The batch

(defun forj-loop--at-limit-p ()
  "Non-nil when this turn has run all the tool batches it may."
  (and (not (forj-session-unbounded forj-session))
       (>= (forj-session-iterations forj-session) (forj-loop-max-iterations))))

(defun forj-loop-set-limit (limit)
  "Let each user message of this chat lead to LIMIT tool batches; nil: the default."
  (setf (forj-session-limit forj-session) limit)
  (force-mode-line-update))

(defun forj-loop-max-iterations ()
  "How many tool batches one user message may lead to in this chat.
The chat's own limit (`forj-loop-set-limit'), else
`forj-chat-max-tool-iterations', else the worker's configuration."
  (or (forj-session-limit forj-session)
      forj-chat-max-tool-iterations
      (let* ((worker (and (forj-session-root forj-session) (forj-worker-get (forj-session-root forj-session))))
             (config (and worker (plist-get (forj-worker-hello worker) :config)))
             (limit (plist-get (plist-get (plist-get config :effective) :tools)
                               :max_tool_iterations_per_user_turn)))
        (and (natnump limit) (> limit 0) limit))
      4))

(defun forj-loop--answer-unrun (entries message recovery)
  "Answer the tool-call ENTRIES, which will not run, with MESSAGE; record it.
RECOVERY is the step the model reads next."
  (forj-session-view 'results-start)
  (let ((batch (forj-tools-new-batch entries (forj-session-view 'output) nil)))
    (forj-tools-fail-all batch (list :type "validation-error" :message message
                                     :recovery (vector recovery)))
    (forj-session-view 'output-to (forj-tools-batch-end batch))
    (forj-loop--record-results entries (append (forj-tools-batch-results batch) nil))
    (forj-session-view 'insert "\n")))

(defun forj-loop--reply-cut (stop entries)
  "Show that the token limit cut the reply (STOP has why); do not run its ENTRIES.
The user may let the model go on with `forj-continue'."
  (let* ((cut-call (plist-get stop :cut-call))
         (open-block (cl-find-if (lambda (e) (plist-get e :error)) entries))
         (where (cond (cut-call (format ", in the middle of a call to %s, which was dropped" cut-call))
                      (open-block ", in the middle of a tool-call block")
                      (t ""))))
    (when entries
      (forj-loop--answer-unrun
       entries "Not run: your reply was cut off by the output token limit"
       "Write the call again, whole, when you go on"))
    (forj-session-notice
     (concat (format "the reply was cut off by the output token limit (%s)%s; none of its tool calls ran."
                     (plist-get stop :reason) where)
             (substitute-command-keys
              "  \\<forj-chat-mode-map>\\[forj-continue] (M-x forj-continue) lets the model go on; a larger :max-tokens in `forj-providers' gives it more room")))
    (forj-loop-end-turn
     (list :kind 'cut
           :text (format "Your last reply was cut off by the output token limit%s.  No tool call of it ran.  Go on from exactly where it stopped, and write any tool call again, whole."
                         (if cut-call (format " in the middle of a call to %s" cut-call) ""))))))

(defun forj-loop--reply-refused (stop entries)
  "The model or its provider refused to answer (STOP gives the reason).
Its tool-call ENTRIES, if any, do not run."
  (when entries
    (forj-loop--answer-unrun entries "Not run: the reply was stopped by the provider's safety system"
                             "Answer the user without this call"))
  (forj-session-notice
   (concat (format "%s refused to answer: %s."
                   (or (plist-get (forj-session-provider forj-session) :name) "the provider")
                   (plist-get stop :reason))
           (substitute-command-keys
            "  \\<forj-chat-mode-map>\\[forj-retry] (M-x forj-retry) asks again; with C-u, another model")))
  (forj-loop-end-turn))

(defvar-local forj-loop--pauses nil
  "(TURN . N): the provider paused turn TURN N times in a row.")

(defconst forj-loop-max-pauses 5
  "How many times in a row a paused turn is resumed without asking the user.")

(defun forj-loop--reply-paused (stop)
  "Ask the provider to go on with the turn it paused; STOP has why.
After `forj-loop-max-pauses' pauses in a row, the user decides."
  (let* ((turn (forj-session-turn forj-session))
         (count (1+ (if (eql (car forj-loop--pauses) turn) (cdr forj-loop--pauses) 0))))
    (setq forj-loop--pauses (cons turn count))
    (if (> count forj-loop-max-pauses)
        (progn
          (forj-session-notice
           (concat (format "%s paused its turn %d times in a row (%s); forj stopped asking it to go on."
                           (or (plist-get (forj-session-provider forj-session) :name) "the provider")
                           (1- count) (plist-get stop :reason))
                   (substitute-command-keys
                    "  \\<forj-chat-mode-map>\\[forj-continue] (M-x forj-continue) lets it go on")))
          (forj-loop-end-turn (list :kind 'paused)))
      (forj-session-notice (format "%s paused its turn (%s); forj asks it to go on"
                                   (or (plist-get (forj-session-provider forj-session) :name)
                                       "the provider")
                                   (plist-get stop :reason)))
      (forj-loop-request))))

(defun forj-loop--record-results (entries results)
  "Add the tool results section of ENTRIES and their RESULTS to the record.
It holds, per call, its header line and a tool-result block with the
result's JSON, which is what the model reads.  The view is told the
section is whole."
  (forj-session-view
   'results-end (forj-session-record-add "tool" (forj-session-results-text entries results))))

(defun forj-loop--run-batch (entries)
  "Run the tool-call ENTRIES of the reply as one batch, then resume the model."
  (cl-incf (forj-session-iterations forj-session))
  (let ((buffer (current-buffer))
        (turn (forj-session-turn forj-session)))
    (forj-session-view 'results-start)
    (setf (forj-session-state forj-session) 'tools)
    (force-mode-line-update)
    (setq-local forj-tools-capacity-bytes (forj-loop-result-budget))
    (let ((snapshot (forj-diagnostics-snapshot entries (forj-session-root forj-session)))
          (forj-tools-turn (forj-session-turn-id forj-session))
          (forj-tools-plan-mode (pcase forj-chat-tools-mode
                                  ('parse-only "parse_only")
                                  ('disabled "disabled")
                                  (_ "enabled"))))
      (setf (forj-session-batch forj-session)
            (forj-tools-run-entries
             entries (forj-session-view 'output)
             (lambda (results)
               (when (buffer-live-p buffer)
                 (with-current-buffer buffer (forj-loop--batch-done turn entries results snapshot))))
             (forj-session-root forj-session))))))

(defun forj-loop--batch-done (turn entries results &optional snapshot)
  "The batch of TURN has RESULTS for ENTRIES: resume the model unless stopped.
SNAPSHOT is what the checkers said before the batch
\=(`forj-diagnostics-snapshot')."
  (let ((batch (forj-session-batch forj-session)))
    (when batch
      (forj-session-view 'output-to (forj-tools-batch-end batch))
      (setf (forj-session-batch forj-session) nil))
    (if (and forj-chat-batch-interrupted-function
             (= turn (forj-session-turn forj-session))
             (not (forj-session-cancelled forj-session))
             (cl-some (lambda (r) (equal (plist-get (plist-get r :error) :type) "worker-died")) results))
        ;; The journal knows what ran; the results here only say the
        ;; connection went.  Recovery tells the model what happened.
        (progn
          (forj-session-view 'results-discard)
          (funcall forj-chat-batch-interrupted-function entries results batch))
      ;; What the checkers say of the edits, and the user's notes, go
      ;; with the results the model reads.
      (let ((buffer (current-buffer))
            (root (forj-session-root forj-session)))
        (forj-diagnostics-after-batch
         snapshot results root
         (lambda (results)
           (when (buffer-live-p buffer)
             (with-current-buffer buffer
               (let ((said (forj-diagnostics-summary results)))
                 (when said (forj-session-notice said)))
               (forj-loop--batch-recorded batch turn entries
                                          (forj-hooks-after-results entries results root))))))))))

(defun forj-loop--batch-recorded (batch turn entries results)
  "Record RESULTS of ENTRIES (of BATCH, of TURN); resume the model unless stopped."
  (forj-loop--record-results entries results)
  (forj-session-view 'insert "\n")
  (setf (forj-session-state forj-session) 'streaming)
  (forj-session-flush-notices)
  (if (or (forj-session-cancelled forj-session)
          (/= turn (forj-session-turn forj-session))
          (and batch (forj-tools-batch-cancelled batch))
          (forj-loop--turn-stops batch))
      (progn
        (when (and batch (forj-tools-batch-cancelled batch))
          (forj-session-notice "the batch was cancelled in review; the model was not resumed"))
        (forj-loop-end-turn))
    (let ((families (and (not (eq forj-chat-tool-set 'all)) (forj-loop--families-to-load entries))))
      (if (null families)
          (forj-loop-request)
        ;; The next request offers the loaded families' tools too.
        (setf (forj-session-families forj-session)
              (append (forj-session-families forj-session) families))
        (forj-loop-with-worker #'forj-loop-request)))))

(defun forj-loop--refuse-batch (entries)
  "Refuse the tool-call ENTRIES of the reply: the iteration limit is reached.
Resume the model once more at most."
  (let ((buffer (current-buffer))
        (again (forj-session-capped forj-session)))
    (setf (forj-session-capped forj-session) t)
    (forj-session-view 'results-start)
    (let ((batch (forj-tools-refuse-entries
                  entries (forj-session-view 'output)
                  (format "Max tool iterations reached (%d per user message); no call was run"
                          (forj-loop-max-iterations)))))
      (forj-session-view 'output-to (forj-tools-batch-end batch))
      (forj-loop--record-results entries (append (forj-tools-batch-results batch) nil))
      (forj-session-view 'insert "\n")
      (if again
          (forj-loop-end-turn)
        (with-current-buffer buffer (forj-loop-request))))))

;;; The end of a turn

(defun forj-loop--turn-stops (batch)
  "Take in what the worker said of the turn after BATCH; non-nil if the loop stops.
A batch of `continue_loop' tools does not count toward the iteration
limit; after an `exit_loop' tool the loop hands back to the user."
  (let* ((consent (and batch (forj-tools-batch-consent batch)))
         (state (plist-get consent :turn)))
    (when (and state (listp state))
      (setf (forj-session-turn-state forj-session) (cons (forj-session-turn forj-session) state))
      (when (or (eq (plist-get state :continue_loop) t)
                (eq (plist-get (plist-get consent :plan-turn) :continue_loop) t))
        (setf (forj-session-iterations forj-session) (max 0 (1- (forj-session-iterations forj-session)))))
      (when (eq (plist-get state :exit_loop) t)
        (forj-session-notice (format "%s ended the tool loop (an exit_loop rule); your turn"
                                     (let ((tool (plist-get state :exit_tool)))
                                       (if (stringp tool) tool "a tool"))))
        t))))

(defun forj-loop--turn-done ()
  "The model ended its turn: end it, unless a rule still waits for tools.
When the worker said the turn may not end yet (`before_exit'), the
model is told its instructions, as a note from forj, within the
iteration limit."
  (let* ((said (forj-session-turn-state forj-session))
         (state (and (eq (car said) (forj-session-turn forj-session)) (cdr said)))
         (waiting (append (plist-get state :before_exit) nil))
         (instructions (append (plist-get state :instructions) nil)))
    (setf (forj-session-turn-state forj-session) nil)
    (if (and waiting instructions (not (forj-session-cancelled forj-session))
             (not (forj-loop--at-limit-p)))
        (progn
          (cl-incf (forj-session-iterations forj-session))
          (forj-loop--tell-model instructions))
      (forj-loop-end-turn))))

(defun forj-loop--tell-model (sentences)
  "Send SENTENCES to the model as a note from forj, then resume it.
The note is a user message of the record, so the transcript holds what
the model read."
  (forj-session-show
   (forj-session-record-add
    "user" (concat "\n## User\n\n"
                   (forj-session-escape (concat "(forj) " (mapconcat #'identity sentences " ")))
                   "\n\n")))
  (forj-loop-request))

(defun forj-loop-end-turn (&optional continuation)
  "The turn is over: the prompt is the user's again.
CONTINUATION, a plist (:kind KIND :text TEXT), is what `forj-continue'
does next: send TEXT as a message (or, without TEXT, ask the model
again).  A turn that reached the iteration limit offers to go on."
  (setf (forj-session-state forj-session) 'idle
        (forj-session-unbounded forj-session) nil
        (forj-session-reply forj-session) nil
        (forj-session-stream forj-session) nil
        (forj-session-batch forj-session) nil
        (forj-session-continuation forj-session) continuation)
  (forj-session-view 'turn-end)
  (forj-session-flush-notices)
  (when (and (forj-session-capped forj-session) (not (forj-session-cancelled forj-session))
             (null continuation))
    (let ((limit (forj-loop-max-iterations)))
      (setf (forj-session-continuation forj-session)
            (list :kind 'capped
                  :text (format "Go on with the task: you may use tools for %d more batches." limit)))
      (forj-session-notice
       (concat (format "this message reached its limit of %d tool batches." limit)
               (substitute-command-keys
                (format "  \\<forj-chat-mode-map>\\[forj-continue] (M-x forj-continue) lets the model go on for %d more; C-u \\[forj-continue] (M-x forj-continue-to-end) to the end of this turn; M-x forj-set-iteration-limit sets this chat's limit"
                        limit))))))
  (forj-notify-turn-ended (forj-loop--last-reply-text) (forj-session-cancelled forj-session))
  (forj-hooks-turn-ended (forj-session-root forj-session)
                         (plist-get (forj-session-continuation forj-session) :kind))
  (force-mode-line-update)
  (when (and (get-buffer-window (current-buffer)) (not noninteractive))
    (message "forj: your turn")))

(defun forj-loop--last-reply-text ()
  "The text of the model's last reply in the record, or nil."
  (let ((entry (cl-find "assistant" (forj-session-record forj-session)
                        :key (lambda (e) (plist-get e :role)) :test #'equal :from-end t)))
    (and entry (plist-get entry :text))))

;;; What the user asks for

(defun forj-loop-send (text)
  "Send the user's message TEXT to the model: a new turn.
A chat with no provider picks one first; a `user-error' says what to
do when it cannot ask a model."
  (setq text (forj-commands-expand text (forj-session-root forj-session)))
  (unless (forj-session-provider forj-session)
    (setf (forj-session-provider forj-session) (forj-session-choose-provider)))
  (forj-loop-check-provider)
  (forj-loop-confirm-root)
  (forj-loop-start-turn text ""))

(defun forj-loop-continue (&optional to-end)
  "Let the model go on where the last turn stopped (`forj-continue').
TO-END non-nil: the turn runs tools until the model is done, with no
limit of batches."
  (forj-loop-check-provider)
  (forj-loop-confirm-root)
  (let* ((continuation (forj-session-continuation forj-session))
         (text (if (and to-end (eq (plist-get continuation :kind) 'capped))
                   "Go on with the task until it is done; then answer without tools."
                 (plist-get continuation :text)))
         (forj-loop--to-end to-end))
    (forj-loop-start-turn text (forj-session-draft))))

(defun forj-loop-retry-index ()
  "Where a retry cuts the record: (INDEX), INDEX nil to cut nothing; or nil.
INDEX is the last reply's.  A message of the user's after the last
reply was never answered: that is the reply to ask for, and nothing is
cut.  Nil when there is no reply to retry."
  (let* ((record (forj-session-record forj-session))
         (role (lambda (e) (plist-get e :role)))
         (index (cl-position "assistant" record :key role :test #'equal :from-end t))
         (unanswered (cl-position "user" record :key role :test #'equal
                                  :start (if index (1+ index) 0))))
    (cond (unanswered (list nil))
          (index (list index)))))

(defun forj-loop-retry ()
  "Ask the model for its last reply again (`forj-retry').
The last reply and what followed it leave the record."
  (let ((index (car (forj-loop-retry-index))))
    (forj-loop-check-provider)
    (forj-loop-confirm-root)
    (when index
      (let ((ran (cl-some (lambda (e) (equal (plist-get e :role) "tool"))
                          (nthcdr index (forj-session-record forj-session)))))
        (setf (forj-session-record forj-session) (cl-subseq (forj-session-record forj-session) 0 index))
        (forj-session-view 'redraw nil)
        (when ran
          (forj-session-notice "retrying a reply whose tool calls ran: the files they changed stay as they are"))))
    (forj-loop-start-turn nil nil)))

(defun forj-loop-stop ()
  "Stop the reply being streamed or the tools running; do not resume."
  (setf (forj-session-cancelled forj-session) t)
  (cl-incf (forj-session-turn forj-session))
  (pcase (forj-session-state forj-session)
    ('streaming
     (forj-provider-stop (forj-session-stream forj-session))
     (let* ((entry (and (forj-session-reply forj-session) (forj-loop--finish-reply)))
            (said (and entry (not (string-blank-p
                                   (cdr (forj-session-split-heading (plist-get entry :text))))))))
       (forj-session-notice "stopped by the user")
       (forj-loop-end-turn (if said
                               (list :kind 'stopped :text "Go on from where you stopped.")
                             (list :kind 'stopped)))))
    ('tools
     (let ((batch (forj-session-batch forj-session)))
       (cond
        ((null batch) (forj-loop-end-turn))
        ((forj-tools-manual-entries batch)
         ;; Parse-only: the calls waiting for the user's results are cancelled.
         (forj-tools-fail-all batch (list :type "cancelled" :message "The user stopped the turn"
                                          :recovery ["Ask the user how to go on"])))
        (t
         (let ((review (forj-tools-batch-review batch)))
           (when (buffer-live-p review)
             (with-current-buffer review (forj-review-cancel))))
         (when (and (forj-tools-batch-batch-id batch) (forj-tools-batch-worker batch))
           (forj-epc-call (forj-worker-connection (forj-tools-batch-worker batch)) "cancel"
                          (list :batch_id (forj-tools-batch-batch-id batch))))
         (message "forj: stopping the tools…")))))
    (_ (message "forj: nothing to stop"))))

(defun forj-loop-compact ()
  "Have the model summarise the conversation now (`forj-compact')."
  (let ((cut (length (forj-session-record forj-session))))
    (when (< (forj-compact-summarisable cut) 2)
      (user-error "Nothing to compact yet"))
    (cl-incf (forj-session-turn forj-session))
    (forj-loop-with-worker
     (lambda () (forj-compact-now cut #'forj-loop-end-turn)))))

(provide 'forj-loop)
;;; forj-loop.el ends here
