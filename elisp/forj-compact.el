;;; forj-compact.el --- Keeping a long chat inside the model's context window  -*- lexical-binding: t; -*-

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

;; Before each request, the chat estimates the tokens it will send:
;; the prompt and reply tokens the provider counted for the last
;; request, plus what was added since (in bytes, converted with
;; `forj-usage-bytes-per-token'), or the bytes of everything when no
;; count describes the conversation.  When that reaches
;; `forj-compact-threshold' of the model's context window, the
;; conversation is compacted first: the model is asked, with the same
;; system prompt, tools and messages (so a provider's cache serves
;; them), to summarise it into one message, and that summary replaces
;; every earlier message in what is sent.  The user's message that
;; started the turn stays as it was written, after the summary; in the
;; middle of a turn, so does the latest batch (the reply's calls and
;; their results), so the model goes on from them.
;;
;; The record keeps everything: the summary is one more entry, a
;; "## User" section that starts with `forj-compact-marker', and the
;; chat, its view and its saved file still hold the whole history.
;; Reading the record for the model (`forj-compact-messages') drops
;; what comes before the last summary.  `forj-compact' compacts on
;; demand.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-provider)
(require 'forj-usage)
(require 'forj-session)
(require 'forj-context)

(defcustom forj-compact-threshold 0.8
  "Compact the conversation when a request would fill this share of the window.
A number between 0 and 1 of the model's context window (see
`forj-usage-context-windows'), or nil to compact only on demand
\(`forj-compact')."
  :type '(choice (const :tag "Only on demand" nil)
                 (number :tag "Share of the context window"))
  :group 'forj)

(defconst forj-compact-marker "<!-- forj-summary -->"
  "The first line of a summary entry: the model reads nothing before it.")

(defconst forj-compact-instruction
  "Write a summary that replaces the whole conversation above: forj will send it to you instead of those messages, and you will go on from it with no other memory of them.  Keep: what the user asked for and the decisions taken (their words where short), every file path you read, created or changed with what you learned from it or changed in it, the commands run and what came of them, errors met and how they were solved, the state of the work and the next step.  Reduce tool results to what was learned from them; leave out file contents that can be read again.  Do not call any tool.  Answer with the summary only, in Markdown."
  "What the model is asked to write when the conversation is compacted.")

;;; Reading the record

(defun forj-compact--summary-entry-p (entry)
  "Non-nil if the record's ENTRY is a summary."
  (and (equal (plist-get entry :role) "user")
       (string-match-p (concat "\\`\n*## User\n\n" (regexp-quote forj-compact-marker))
                       (plist-get entry :text))))

(defun forj-compact-messages (messages)
  "Return MESSAGES for the model: from the last summary on.
A summary written in the middle of a turn (after a batch's results)
is followed by the user's message that started the turn, in the same
message, and by the latest batch: the reply with its calls and their
results, so the model goes on from them, each call paired with its
result."
  (let ((tail nil))
    (cl-loop for rest on messages
             when (forj-compact--summary-message-p (car rest)) do (setq tail rest))
    (if (null tail)
        messages
      (let* ((summary (string-trim (substring (plist-get (car tail) :text)
                                              (length forj-compact-marker))))
             (before (reverse (cl-ldiff messages tail)))
             (results (car before))
             (calls (cadr before)))
        (if (not (and results (forj-compact--results-p results)
                      (equal (plist-get calls :role) "assistant")))
            (cons (list :role "user" :text summary) (cdr tail))
          (let ((start (cl-find-if (lambda (m)
                                     (and (equal (plist-get m :role) "user")
                                          (not (forj-compact--results-p m))
                                          (not (forj-compact--summary-message-p m))))
                                   (cddr before))))
            (append (list (list :role "user"
                                :text (if start
                                          (concat summary "\n\n" (plist-get start :text))
                                        summary)))
                    (list calls results)
                    (cdr tail))))))))

(defun forj-compact--results-p (message)
  "Non-nil if MESSAGE carries tool results (native, or fenced blocks as user text)."
  (or (equal (plist-get message :role) "tool")
      (and (equal (plist-get message :role) "user")
           (string-prefix-p "```tool-result" (or (plist-get message :text) "")))))

(defun forj-compact--summary-message-p (message)
  "Non-nil if MESSAGE is the user message of a summary."
  (and (equal (plist-get message :role) "user")
       (string-prefix-p forj-compact-marker (or (plist-get message :text) ""))))

;;; Estimates

(defvar-local forj-compact--estimate nil
  "The last estimate: (KEY TOKENS ESTIMATED), KEY what it was computed from.")

(defun forj-compact--live-entries ()
  "The record's entries from its last summary on (all of them without one)."
  (let ((from (cl-position-if #'forj-compact--summary-entry-p (forj-session-record forj-session) :from-end t)))
    (if from (nthcdr from (forj-session-record forj-session)) (forj-session-record forj-session))))

(defun forj-compact--bytes (entries)
  "The bytes of the record's ENTRIES."
  (apply #'+ (mapcar (lambda (e) (string-bytes (plist-get e :text))) entries)))

(defun forj-compact-tools-bytes ()
  "The bytes of the tool definitions a request carries besides the system prompt.
Native function calling sends them as the request's tools; with fenced
blocks they are part of the system prompt."
  (if (and (forj-session-native-p) (forj-session-tools forj-session))
      (string-bytes (forj-tools-json-encode (vconcat (forj-session-tools forj-session))))
    0))

(defun forj-compact-parts ()
  "Count the bytes of the next request: (:tools :system :context :conversation).
With fenced blocks the tool definitions are counted in :tools and not
again in :system."
  (let* ((system (string-bytes (forj-session-system-prompt)))
         (fenced (if (or (forj-session-native-p) (eq (forj-session-effective-tools-mode) 'disabled))
                     0
                   (string-bytes
                    (mapconcat (lambda (tool)
                                 (concat (plist-get tool :name) (plist-get tool :description)
                                         (forj-tools-json-encode (plist-get tool :parameters))))
                               (append (forj-session-tools forj-session) nil) "")))))
    (list :tools (+ fenced (forj-compact-tools-bytes))
          :system (max 0 (- system fenced))
          :context (forj-context-bytes)
          :conversation (forj-compact--bytes (forj-compact--live-entries)))))

(defun forj-compact-estimate ()
  "The tokens the next request will hold: (TOKENS . ESTIMATED).
ESTIMATED is non-nil when no provider count was used."
  (let ((key (list (length (forj-session-record forj-session)) forj-usage-basis
                   (forj-context-bytes) (forj-session-provider forj-session) forj-chat-tools-mode
                   (length (forj-session-tools forj-session)))))
    (unless (equal (car forj-compact--estimate) key)
      (setq forj-compact--estimate
            (cons key
                  (if forj-usage-basis
                      ;; Counted up to the last reply; what came after it is new.
                      (let* ((last (cl-position "assistant" (forj-session-record forj-session)
                                                :key (lambda (e) (plist-get e :role))
                                                :test #'equal :from-end t))
                             (record (forj-session-record forj-session))
                             (after (if last (nthcdr (1+ last) record) record)))
                        (cons (+ (forj-usage-prompt forj-usage-basis)
                                 (plist-get forj-usage-basis :output)
                                 (forj-usage-tokens-of-bytes (forj-compact--bytes after)))
                              nil))
                    (cons (forj-usage-tokens-of-bytes
                           (+ (string-bytes (forj-session-system-prompt))
                              (forj-compact-tools-bytes)
                              (forj-context-bytes)
                              (forj-compact--bytes (forj-compact--live-entries))))
                          t)))))
    (cdr forj-compact--estimate)))

(defun forj-compact-header ()
  "The usage part of a chat's header line."
  (let ((estimate (forj-compact-estimate)))
    (forj-usage-header (forj-session-provider forj-session) (car estimate) (cdr estimate))))

;;; Compacting

(defvar-local forj-compact--skip nil
  "Non-nil right after a compaction: the request that follows goes as it is.")

(defun forj-compact-before-request (request)
  "Compact the conversation first if it is over the threshold, then call REQUEST.
Return non-nil if compaction was started (it calls REQUEST when done);
nil if REQUEST should go on now."
  (cond
   (forj-compact--skip (setq forj-compact--skip nil) nil)
   ((or (null forj-compact-threshold)
        ;; A recorded session replays its replies; it cannot summarise.
        (eq (plist-get (forj-session-provider forj-session) :family) 'scripted))
    nil)
   (t
    (let* ((estimate (car (forj-compact-estimate)))
           (window (forj-usage-context-window (forj-session-provider forj-session)))
           (cut (forj-compact--cut)))
      (when (and (>= estimate (* forj-compact-threshold window))
                 (> (forj-compact-summarisable cut) 1))
        (message "forj: the conversation fills %d%% of the context window; compacting it"
                 (round (* 100.0 (/ (float estimate) window))))
        (forj-compact--start cut request)
        t)))))

(defun forj-compact--cut ()
  "Return the index of the summary in the record: before a new user message."
  (let ((last (car (last (forj-session-record forj-session)))))
    (if (and (equal (plist-get last :role) "user") (not (forj-compact--summary-entry-p last)))
        (1- (length (forj-session-record forj-session)))
      (length (forj-session-record forj-session)))))

(defun forj-compact-summarisable (cut)
  "How many conversation entries before CUT a summary would replace."
  (let ((entries (cl-subseq (forj-session-record forj-session) 0 cut))
        (from (cl-position-if #'forj-compact--summary-entry-p (forj-session-record forj-session)
                              :from-end t :end cut)))
    (cl-count-if (lambda (e) (member (plist-get e :role) '("user" "assistant" "tool")))
                 (if from (nthcdr (1+ from) entries) entries))))

(defun forj-compact--start (cut then)
  "Have the model summarise the record before CUT; call THEN when done.
THEN is also called when the summary fails (after a notice): the
request then goes uncompacted and the provider says if it is too long."
  (let* ((buffer (current-buffer))
         (turn (forj-session-turn forj-session))
         (messages (forj-context-messages
                    (forj-compact-messages
                     (forj-session-messages-of (cl-subseq (forj-session-record forj-session) 0 cut)))))
         (replaced (forj-compact-summarisable cut))
         (text "")
         (provider (forj-session-provider forj-session)))
    (setf (forj-session-stream forj-session)
          (forj-provider-start
           provider (forj-session-system-prompt)
           (append messages (list (list :role "user" :text forj-compact-instruction)))
           (and (not (eq forj-chat-tools-mode 'disabled)) (append (forj-session-tools forj-session) nil))
           (list :on-text (lambda (piece) (setq text (concat text piece)))
                 :on-call #'ignore
                 :on-usage (forj-usage-recorder buffer provider)
                 :on-done (lambda ()
                            (forj-compact--finish buffer turn cut text replaced then))
                 :on-error (lambda (message)
                             (forj-compact--failed buffer turn message then)))))
    (force-mode-line-update)))

(defun forj-compact--live-p (buffer turn)
  "Non-nil if BUFFER is alive and still in TURN (the user did not stop it)."
  (and (buffer-live-p buffer) (= turn (forj-session-turn (buffer-local-value 'forj-session buffer)))))

(defun forj-compact--failed (buffer turn message then)
  "The summary of BUFFER's TURN failed with MESSAGE: say so, then call THEN."
  (when (forj-compact--live-p buffer turn)
    (with-current-buffer buffer
      (setf (forj-session-stream forj-session) nil forj-compact--skip t)
      (forj-session-notice (format "the conversation could not be compacted (%s); it is sent whole" message))
      (funcall then))))

(defun forj-compact--finish (buffer turn cut text replaced then)
  "Put the summary TEXT in BUFFER's record at CUT, then call THEN.
REPLACED is how many messages it replaces.  Nothing happens if the
user stopped TURN."
  (when (forj-compact--live-p buffer turn)
    (with-current-buffer buffer
      (setf (forj-session-stream forj-session) nil)
      (if (string-blank-p text)
          (forj-compact--failed buffer turn "the model wrote no summary" then)
        (let* ((summary (list :role "user"
                              :text (concat "\n## User\n\n" forj-compact-marker "\n"
                                            "**Summary of the earlier conversation**, written by the model to replace it:\n\n"
                                            (string-trim (forj-session-escape text)) "\n\n")))
               (notice (list :role "notice"
                             :text (concat forj-session-notice-prefix
                                           (format "compacted: %d earlier messages are summarised above (≈%s tokens); the model reads the summary and what follows, the chat and its file keep everything\n"
                                                   replaced
                                                   (forj-usage-format-tokens
                                                    (forj-usage-tokens-of-bytes (string-bytes text)))))))
               (at-end (= cut (length (forj-session-record forj-session)))))
          (setf (forj-session-record forj-session) (append (cl-subseq (forj-session-record forj-session) 0 cut)
                                                           (list summary notice)
                                                           (nthcdr cut (forj-session-record forj-session)))
                forj-usage-basis nil
                forj-compact--skip t)
          (if at-end
              (progn (forj-session-show summary) (forj-session-show notice))
            (forj-session-view 'redraw nil))
          (force-mode-line-update)
          (funcall then))))))

(defun forj-compact-now (cut then)
  "Have the model summarise the record before CUT now; call THEN when done."
  (forj-compact--start cut (lambda ()
                             (setq forj-compact--skip nil)
                             (funcall then))))

(provide 'forj-compact)
;;; forj-compact.el ends here
